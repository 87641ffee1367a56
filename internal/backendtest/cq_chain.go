package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// testCQChain: a chain prepared once (QueuePair.PrepareOps) and posted in
// ranges (Chain.Post), as a verbs program re-posts its work requests.
// 48 Puts and Gets of 8 bytes on one local and one remote region (the
// chain shm arms with its handles checked once) go out in rounds of
// different ranges: every byte of each range lands and nothing else
// changes, each operation is reported once with its ID, and the caller's
// slices changed after PrepareOps change nothing. Then the local region
// is released: every operation of the next Post fails with ErrReleased,
// the remote bytes untouched. Where the route survives a remote error,
// a second chain on a remote region its owner released fails each
// operation as PostOps fails the same operations, the local bytes
// untouched.
func testCQChain(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n, size = 48, 8
	cq := queuepair.NewCompletionQueue(2 * n)
	qp := NewQueuePair(t, p.Route, p.RegA, p.A.Kind(), f.Timeout, cq)
	ha, la := Alloc(t, p.RegA, n*size, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n*size, buffer.AccessReadWrite)
	wrs, ops := newWRs(n), chainOps(t, ha, hb, n, size)
	pc := qp.PrepareOps(wrs, ops)
	orig := slices.Clone(wrs)
	if pc.Len() != n {
		t.Fatalf("Len %d, want %d", pc.Len(), n)
	}
	ops[0].Remote, ops[1].Local, wrs[2] = buffer.Buffer{}, buffer.Buffer{}, nil // the chain's are copies
	for round, r := range [][2]int{{0, n}, {5, 20}, {20, n}, {0, 1}, {0, n}, {47, n}} {
		Random(t, la)
		Random(t, lb)
		wantA, wantB := bytes.Clone(la), bytes.Clone(lb)
		for i := r[0]; i < r[1]; i++ {
			at := i * size
			if i%2 == 0 { // a Put
				copy(wantB[at:at+size], la[at:at+size])
			} else {
				copy(wantA[at:at+size], lb[at:at+size])
			}
		}
		pc.Post(context.Background(), r[0], r[1])
		for w, err := range Reap(t, cq, r[1]-r[0], f.Timeout, nil) {
			if err != nil {
				t.Fatalf("round %d: operation %d: %v", round, w.ID(), err)
			}
			if id := int(w.ID()); id < r[0] || id >= r[1] || w != orig[id] {
				t.Fatalf("round %d: the queue reported ID %d, posted %v", round, id, r)
			}
		}
		name := fmt.Sprintf("round %d (%v)", round, r)
		AssertSame(t, "remote after "+name, lb, wantB)
		AssertSame(t, "local after "+name, la, wantA)
	}
	before := bytes.Clone(lb)
	if err := p.RegA.Release(context.Background(), ha); err != nil {
		t.Fatal(err)
	}
	pc.Post(context.Background(), 0, n)
	for w, err := range Reap(t, cq, n, f.Timeout, nil) {
		if !errors.Is(err, rdmamgr.ErrReleased) {
			t.Fatalf("operation %d on a released local region: %v, want ErrReleased", w.ID(), err)
		}
	}
	AssertSame(t, "remote after a chain on a released local region", lb, before)

	if !f.RouteSurvivesRemoteError || f.ReleasedErr == nil {
		return
	}
	ha2, la2 := Alloc(t, p.RegA, n*size, buffer.AccessReadWrite)
	hb2, _ := Alloc(t, p.RegB, n*size, buffer.AccessReadWrite)
	ops2 := chainOps(t, ha2, hb2, n, size)
	wrs2 := newWRs(n)
	pc2 := qp.PrepareOps(wrs2, ops2)
	pc2.Post(context.Background(), 0, n) // maps the remote region where a route maps it
	for w, err := range Reap(t, cq, n, f.Timeout, nil) {
		if err != nil {
			t.Fatalf("operation %d: %v", w.ID(), err)
		}
	}
	if err := p.RegB.Release(context.Background(), hb2); err != nil {
		t.Fatal(err)
	}
	Random(t, la2)
	before = bytes.Clone(la2)
	plain := newWRs(n)
	pc2.Post(context.Background(), 0, n)
	qp.PostOps(context.Background(), plain, ops2)
	got := Reap(t, cq, 2*n, f.Timeout, nil)
	for i, w := range plain {
		ce, pe := got[wrs2[i]], got[w]
		if !errors.Is(ce, f.ReleasedErr) || !errors.Is(pe, f.ReleasedErr) {
			t.Fatalf("operation %d on a released remote region: chain %v, PostOps %v, want %v for both", i, ce, pe, f.ReleasedErr)
		}
	}
	AssertSame(t, "local after Gets from a released remote region", la2, before)
}

// chainOps returns n operations of size bytes at slot i of ha and hb
// each, Puts at even slots and Gets at odd ones, each ID its slot.
func chainOps(t *testing.T, ha, hb buffer.Buffer, n, size int) []queuepair.Op {
	ops := make([]queuepair.Op, n)
	for i := range ops {
		l, r := Slice(t, ha, i*size, size), Slice(t, hb, i*size, size)
		ops[i] = queuepair.PutOp(l, r)
		if i%2 == 1 {
			ops[i] = queuepair.GetOp(l, r)
		}
		ops[i].ID = uint64(i)
	}
	return ops
}
