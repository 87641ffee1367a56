package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// The completion-queue pass: the data checks of the suite again, through
// a queuepair.QueuePair bound to a queuepair.CompletionQueue, posting
// chains with PostOps and reaping with the queue's Wait, as programs do.
// Fewer iterations than the direct checks: it tests the path, not the
// backend's data movement again.

// RunCQ runs the completion-queue pass (Run runs it as "CompletionQueue").
func RunCQ(t *testing.T, f Factory) {
	f = f.withDefaults(t)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"PutGetSizesOffsets", testCQPutGet},
		{"ManyInFlightSharedCQ", testCQManyInFlight},
		{"Refusals", testCQRefusals},
		{"Verbs", testCQVerbs},
		{"Unsignaled", testCQUnsignaled},
		{"Chain", testCQChain},
		{"CancelNoStaleBytes", testCQCancel},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}

// NewQueuePair binds a queue pair (as the manager makes them) to rt from
// A's side over regA, reporting into cq; it is released at the end of the
// test, before the route closes.
func NewQueuePair(t testing.TB, rt backend.Route, regA qpbind.Resolver, kind backend.Kind, timeout time.Duration, cq *queuepair.CompletionQueue) *queuepair.QueuePair {
	t.Helper()
	qp := wiring.NewQueuePair(1, OwnerB, rt, regA, qpbind.Options{Timeout: timeout, Kind: kind}).(*queuepair.QueuePair)
	qp.SetCompletionQueue(cq)
	t.Cleanup(qp.Release)
	return qp
}

// Reap waits (under timeout) until cq reported n work requests and
// returns each one's outcome; a work request reported twice fails the
// test. at, when not nil, runs as each is reaped (a caller taking its
// memory back).
func Reap(t testing.TB, cq *queuepair.CompletionQueue, n int, timeout time.Duration, at func(*queuepair.WorkRequest)) map[*queuepair.WorkRequest]error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seen := make(map[*queuepair.WorkRequest]error, n)
	out := make([]*queuepair.WorkRequest, 16)
	for len(seen) < n {
		k, err := cq.Wait(ctx, out)
		if err != nil {
			t.Fatalf("completion queue: %d of %d reported: %v", len(seen), n, err)
		}
		for _, w := range out[:k] {
			if _, dup := seen[w]; dup {
				t.Fatal("a work request was reported twice")
			}
			if at != nil {
				at(w)
			}
			seen[w] = w.Err()
		}
	}
	if k := cq.Poll(out); k != 0 {
		t.Fatalf("%d more work requests reported than posted", k)
	}
	return seen
}

// newWRs returns n fresh work requests.
func newWRs(n int) []*queuepair.WorkRequest {
	wrs := make([]*queuepair.WorkRequest, n)
	for i := range wrs {
		wrs[i] = new(queuepair.WorkRequest)
	}
	return wrs
}

// testCQPutGet: sizes and offsets, a Put and a Get posted as one chain
// each, on disjoint halves; nothing outside the ranges changes.
func testCQPutGet(t *testing.T, f Factory) {
	p := NewPair(t, f)
	cq := queuepair.NewCompletionQueue(8)
	qp := NewQueuePair(t, p.Route, p.RegA, p.A.Kind(), f.Timeout, cq)
	wrs := newWRs(2)
	for _, n := range []int{1, 4096 + 3, min(1<<20+13, f.MaxSize)} {
		for _, o := range [][2]int{{0, 0}, {1, 4093}, {4093, 1}} {
			half := n + 4096
			ha, la := Alloc(t, p.RegA, 2*half, buffer.AccessReadWrite)
			hb, lb := Alloc(t, p.RegB, 2*half, buffer.AccessReadWrite)
			Random(t, la)
			Random(t, lb)
			wantA, wantB := bytes.Clone(la), bytes.Clone(lb)
			copy(wantB[o[1]:o[1]+n], la[o[0]:o[0]+n])                     // Put into B's first half
			copy(wantA[half+o[0]:half+o[0]+n], lb[half+o[1]:half+o[1]+n]) // Get from B's second half
			qp.PostOps(context.Background(), wrs, []queuepair.Op{
				queuepair.PutOp(Slice(t, ha, o[0], n), Slice(t, hb, o[1], n)),
				queuepair.GetOp(Slice(t, ha, half+o[0], n), Slice(t, hb, half+o[1], n)),
			})
			for w, err := range Reap(t, cq, 2, f.Timeout, nil) {
				if err != nil {
					t.Fatalf("%d bytes at %v: %v", n, o, err)
				}
				if w != wrs[0] && w != wrs[1] {
					t.Fatal("the queue reported a work request nobody posted")
				}
			}
			name := fmt.Sprintf("%d bytes local+%d remote+%d", n, o[0], o[1])
			AssertSame(t, "remote after the chain "+name, lb, wantB)
			AssertSame(t, "local after the chain "+name, la, wantA)
			release(t, p, ha, hb)
		}
	}
}

func release(t testing.TB, p *Pair, ha, hb buffer.Buffer) {
	t.Helper()
	if err := p.RegA.Release(context.Background(), ha); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := p.RegB.Release(context.Background(), hb); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// testCQManyInFlight: two queue pairs (on two routes) share one queue;
// chains of 8 keep 64 operations in flight, every reaped work request is
// re-posted at once, each post is reported exactly once, and every byte
// lands.
func testCQManyInFlight(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const inFlight, chain, total, slot = 64, 8, 768, 4 << 10
	cq := queuepair.NewCompletionQueue(inFlight)
	qps := []*queuepair.QueuePair{
		NewQueuePair(t, p.Route, p.RegA, p.A.Kind(), f.Timeout, cq),
		NewQueuePair(t, p.NewRoute(t), p.RegA, p.A.Kind(), f.Timeout, cq),
	}
	ha, la := Alloc(t, p.RegA, total*slot, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, total*slot, buffer.AccessReadWrite)
	Random(t, la)
	Random(t, lb)
	wantA, wantB := bytes.Clone(la), bytes.Clone(lb)
	rng := mrand.New(mrand.NewPCG(3, uint64(time.Now().UnixNano())))
	ops := make([]queuepair.Op, total)
	for i := range ops {
		n, off := 1+rng.IntN(slot), i*slot
		if i%3 == 0 {
			ops[i] = queuepair.GetOp(Slice(t, ha, off, n), Slice(t, hb, off, n))
			copy(wantA[off:off+n], lb[off:off+n])
		} else {
			ops[i] = queuepair.PutOp(Slice(t, ha, off, n), Slice(t, hb, off, n))
			copy(wantB[off:off+n], la[off:off+n])
		}
	}
	wrs := newWRs(inFlight)
	job := make(map[*queuepair.WorkRequest]int, inFlight) // the op a work request carries now
	next := 0
	for c := 0; c < inFlight; c += chain {
		for i := range chain {
			job[wrs[c+i]] = next + i
		}
		qps[c/chain%2].PostOps(context.Background(), wrs[c:c+chain], ops[next:next+chain])
		next += chain
	}
	reported := make([]int, total)
	ctx, cancel := context.WithTimeout(context.Background(), f.Timeout)
	defer cancel()
	out := make([]*queuepair.WorkRequest, inFlight)
	for done := 0; done < total; {
		k, err := cq.Wait(ctx, out)
		if err != nil {
			t.Fatalf("after %d of %d: %v", done, total, err)
		}
		for _, w := range out[:k] {
			if err := w.Err(); err != nil {
				t.Fatalf("op %d: %v", job[w], err)
			}
			reported[job[w]]++
			done++
			if next < total { // re-post the reaped request at once
				job[w] = next
				qps[next%2].PostOps(context.Background(), []*queuepair.WorkRequest{w}, ops[next:next+1])
				next++
			}
		}
	}
	for i, r := range reported {
		if r != 1 {
			t.Fatalf("op %d reported %d times", i, r)
		}
	}
	AssertSame(t, "remote after the puts", lb, wantB)
	AssertSame(t, "local after the gets", la, wantA)
}

// testCQRefusals: the peer's refusals and this side's reach the poster
// through the queue with the errors of the direct checks; a full queue
// refuses at once with ErrLimit.
func testCQRefusals(t *testing.T, f Factory) {
	for _, tc := range []struct {
		name string
		want error
		make func(p *Pair) (local, remote buffer.Buffer, op queuepair.Op)
	}{
		{"WriteToReadOnly", rdmamgr.ErrAccess, func(p *Pair) (buffer.Buffer, buffer.Buffer, queuepair.Op) {
			ha, _ := Alloc(t, p.RegA, 64, buffer.AccessReadWrite)
			hb, _ := Alloc(t, p.RegB, 64, buffer.AccessRead)
			return ha, hb, queuepair.PutOp(ha, hb)
		}},
		{"WrongKey", f.WrongKeyErr, func(p *Pair) (buffer.Buffer, buffer.Buffer, queuepair.Op) {
			ha, _ := Alloc(t, p.RegA, 64, buffer.AccessReadWrite)
			hb, _ := Alloc(t, p.RegB, 64, buffer.AccessReadWrite)
			hb.Key[0] ^= 0xff
			if hb.RDMA.RKey != 0 {
				hb.RDMA.RKey ^= 0xA5 // the key byte of the rkey: same MR index, wrong key
			}
			return ha, hb, queuepair.GetOp(ha, hb)
		}},
		{"LengthMismatch", rdmamgr.ErrLengthMismatch, func(p *Pair) (buffer.Buffer, buffer.Buffer, queuepair.Op) {
			ha, _ := Alloc(t, p.RegA, 64, buffer.AccessReadWrite)
			hb, _ := Alloc(t, p.RegB, 128, buffer.AccessReadWrite)
			return ha, hb, queuepair.PutOp(ha, hb)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == nil {
				t.Skip("the factory names no error for it")
			}
			p := NewPair(t, f)
			cq := queuepair.NewCompletionQueue(4)
			qp := NewQueuePair(t, p.Route, p.RegA, p.A.Kind(), f.Timeout, cq)
			_, _, op := tc.make(p)
			w := new(queuepair.WorkRequest)
			qp.PostOps(context.Background(), []*queuepair.WorkRequest{w}, []queuepair.Op{op})
			if err := Reap(t, cq, 1, f.Timeout, nil)[w]; !errors.Is(err, tc.want) {
				t.Fatalf("reported %v, want %v", err, tc.want)
			}
			p.checkWorks(t)
		})
	}
	t.Run("FullQueue", func(t *testing.T) {
		p := NewPair(t, f)
		cq := queuepair.NewCompletionQueue(2)
		qp := NewQueuePair(t, p.Route, p.RegA, p.A.Kind(), f.Timeout, cq)
		ha, _ := Alloc(t, p.RegA, 64, buffer.AccessReadWrite)
		hb, _ := Alloc(t, p.RegB, 64, buffer.AccessReadWrite)
		wrs := newWRs(3)
		qp.PostOps(context.Background(), wrs, []queuepair.Op{queuepair.GetOp(ha, hb), queuepair.GetOp(ha, hb), queuepair.GetOp(ha, hb)})
		// The third found both slots held (the first two are not reaped).
		if done, err := wrs[2].Poll(); !done || !errors.Is(err, rdmamgr.ErrLimit) {
			t.Fatalf("third op on a queue of 2: %v %v, want ErrLimit at once", done, err)
		}
		for w, err := range Reap(t, cq, 2, f.Timeout, nil) {
			if err != nil || w == wrs[2] {
				t.Fatalf("reaped %p: %v", w, err)
			}
		}
	})
}

// testCQVerbs: FetchAdds and a CompareAndSwap in one chain, and a Put
// followed by its PutWithImm notice in another.
func testCQVerbs(t *testing.T, f Factory) {
	if !f.Verbs {
		t.Skip("the factory runs no verbs")
	}
	p := NewVerbsPair(t, f, 4, 1)
	p.Need(t, backend.OpFetchAdd, backend.OpCompareSwap, backend.OpWriteImm)
	cq := queuepair.NewCompletionQueue(16)
	qp := NewQueuePair(t, p.Route, p.RegA, p.A.Kind(), f.Timeout, cq)
	hw, lw := Alloc(t, p.RegB, 8, buffer.AccessReadWrite|buffer.AccessAtomic)
	word := ownerWord(t, lw, 0)
	word.Store(100)
	ops := []queuepair.Op{}
	for range 8 {
		ops = append(ops, queuepair.FetchAddOp(hw, 3))
	}
	wrs := newWRs(len(ops))
	qp.PostOps(context.Background(), wrs, ops)
	olds := map[uint64]bool{}
	for w, err := range Reap(t, cq, len(ops), f.Timeout, nil) {
		if err != nil {
			t.Fatalf("fetch-add: %v", err)
		}
		olds[w.Value()] = true
	}
	for i := range 8 {
		if !olds[uint64(100+3*i)] {
			t.Fatalf("fetch-add old values %v miss %d", olds, 100+3*i)
		}
	}
	// Atomics of one chain may run in any order: the swap goes after.
	qp.PostOps(context.Background(), wrs[:2], []queuepair.Op{queuepair.CompareAndSwapOp(hw, 124, 7), queuepair.CompareAndSwapOp(hw, 1, 2)})
	Reap(t, cq, 2, f.Timeout, nil)
	if a, b := wrs[0].Value(), wrs[1].Value(); word.Load() != 7 || !(a == 124 && (b == 7 || b == 124)) {
		t.Fatalf("compare-and-swaps: old %d and %d, word %d; want 124, 7 or 124, 7", a, b, word.Load())
	}

	const n = 4096
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, 2*n, accessNotify)
	Random(t, la)
	imm := uint32(0xC0FFEE)
	wrs = newWRs(2)
	qp.PostOps(context.Background(), wrs, []queuepair.Op{
		queuepair.PutOp(ha, Slice(t, hb, 0, n)),
		queuepair.PutWithImmOp(ha, Slice(t, hb, n, n), imm),
	})
	for _, err := range Reap(t, cq, 2, f.Timeout, nil) {
		if err != nil {
			t.Fatalf("put and put-with-imm: %v", err)
		}
	}
	ev := nextEvent(t, p.Inbox, f.Timeout)
	if ev.Imm != imm || ev.Offset != hb.Offset+n || ev.Length != n {
		t.Fatalf("event %+v", ev)
	}
	AssertSame(t, "remote after put", lb[:n], la)
	AssertSame(t, "remote after put-with-imm", lb[n:], la)
}
