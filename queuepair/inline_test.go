package queuepair

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// takeRoute is seeRoute that also takes runs (qpbind.InlineRunner): it
// records each run, how many requests PostList had seen when it came, and
// sets the outcomes fail names (by Offset), or declines every run.
type takeRoute struct {
	seeRoute
	decline bool
	failAt  map[uint64]error
	offered []inlineCall
}

type inlineCall struct {
	region uint64
	key    buffer.Key
	ops    []qpbind.InlineOp
	after  int // requests PostList had seen
}

func (r *takeRoute) InlineMax() int { return 32 }

func (r *takeRoute) RunInline(region uint64, key buffer.Key, ops []qpbind.InlineOp, errs []error) (failed int, ok bool) {
	r.offered = append(r.offered, inlineCall{region, key, append([]qpbind.InlineOp(nil), ops...), len(r.seen)})
	if r.decline {
		return 0, false
	}
	for i := range ops {
		if errs[i] != nil {
			panic("takeRoute: RunInline's errs not nil on entry")
		}
		if errs[i] = r.failAt[ops[i].Offset]; errs[i] != nil {
			failed++
		}
	}
	return failed, true
}

// TestRunInline: on a route that takes runs, a chain's Puts and Gets on
// one remote region go to RunInline as one run (local bytes, remote
// offset and verb as prepare would resolve them), each reported to the
// completion queue with its id and its own outcome; what is not the run's
// (a different region, an operation over InlineMax, a request's first
// use) is posted as a request, before the run that follows it;
// the run's local references are dropped (the region can be released at
// once). A run the route declines reaches PostList armed exactly as
// prepare arms it.
func TestRunInline(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	defer e.qp.Release()
	r := &takeRoute{seeRoute: seeRoute{nullRoute: nullRoute{fakeRoute: *newFakeRoute()}}}
	qp := newQueuePair(9, peerID, r, e.local, qpbind.Options{})
	cq := NewCompletionQueue(8)
	qp.SetCompletionQueue(cq)
	local := alloc(t, e.local, 256, buffer.AccessReadWrite)
	remA := alloc(t, e.remote, 256, buffer.AccessReadWrite)
	remB := alloc(t, e.remote, 256, buffer.AccessReadWrite)
	sl := func(b buffer.Buffer, off, n uint64) buffer.Buffer {
		s, err := b.Slice(off, n)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ops := []Op{
		PutOp(sl(local, 0, 8), sl(remA, 0, 8)),       // run 1, taking the chain's local references
		GetOp(sl(local, 8, 8), sl(remA, 8, 8)),       // run 1
		PutOp(sl(local, 16, 16), sl(remA, 16, 16)),   // run 1
		PutOp(sl(local, 64, 64), sl(remA, 64, 64)),   // over InlineMax: a request
		PutOp(sl(local, 32, 8), sl(remB, 32, 8)),     // run 2
		GetOp(sl(local, 40, 8), sl(remB, 40, 8)),     // run 2, fails
		PutOp(sl(local, 128, 32), sl(remB, 128, 32)), // run 2
	}
	boom := errors.New("boom")
	r.failAt = map[uint64]error{40: boom}
	wrs := make([]*WorkRequest, len(ops))
	for i := range ops {
		ops[i].ID = uint64(i + 1)
		wrs[i] = new(WorkRequest)
	}
	out := make([]*WorkRequest, 8)
	qp.PostOps(context.Background(), wrs, ops) // new requests: prepare arms each
	if n := cq.Poll(out); n != len(ops) || len(r.offered) != 0 {
		t.Fatalf("first use: reaped %d, %d runs offered; want %d and none", n, len(r.offered), len(ops))
	}
	r.seen, r.done = nil, nil
	qp.PostOps(context.Background(), wrs, ops)
	if n := cq.Poll(out); n != len(ops) {
		t.Fatalf("reaped %d, want %d", n, len(ops))
	}
	for i, w := range wrs {
		want := error(nil)
		if i == 5 {
			want = boom
		}
		if w.ID() != ops[i].ID || !errors.Is(w.Err(), want) {
			t.Fatalf("request %d: id %d, %v; want id %d, %v", i, w.ID(), w.Err(), ops[i].ID, want)
		}
	}
	if len(r.offered) != 2 || len(r.offered[0].ops) != 3 || len(r.offered[1].ops) != 3 || len(r.seen) != 1 {
		t.Fatalf("%d runs, %d requests posted; want runs of 3 and 3 and 1 request", len(r.offered), len(r.seen))
	}
	if r.offered[0].after != 0 || r.offered[1].after != 1 {
		t.Fatalf("runs came after %d and %d requests, want 0 and 1 (the chain's order)", r.offered[0].after, r.offered[1].after)
	}
	ref, err := e.local.AcquireLocalOf(&local)
	if err != nil {
		t.Fatal(err)
	}
	mem := ref.Bytes()
	ref.Release()
	for ri, run := range r.offered {
		first := 4 * ri // ops 0 and 4 begin the runs
		if run.region != ops[first].Remote.Region || run.key != ops[first].Remote.Key {
			t.Fatalf("run %d on region %d, want %d", ri, run.region, ops[first].Remote.Region)
		}
		for j, io := range run.ops {
			o := &ops[first+j]
			if io.Op != o.Op || io.Offset != o.Remote.Offset || uint64(len(io.Local)) != o.Local.Length || &io.Local[0] != &mem[o.Local.Offset] {
				t.Fatalf("run %d op %d: %v at %d, %d local bytes; want %v at %d", ri, j, io.Op, io.Offset, len(io.Local), o.Op, o.Remote.Offset)
			}
		}
	}

	// Declined: posted as prepare arms them.
	r.decline, r.offered, r.seen, r.done = true, nil, nil, nil
	chain := []*WorkRequest{wrs[1], wrs[2]}
	run := []Op{ops[1], ops[2]}
	qp.PostOps(context.Background(), chain, run)
	if n := cq.Poll(out); n != 2 || wrs[1].Err() != nil || wrs[2].Err() != nil {
		t.Fatalf("declined run: reaped %d (%v, %v)", n, wrs[1].Err(), wrs[2].Err())
	}
	if len(r.offered) != 1 || len(r.seen) != 2 {
		t.Fatalf("declined run: %d runs offered, %d requests posted; want 1 and 2", len(r.offered), len(r.seen))
	}
	bare := newQueuePair(10, peerID, r, e.local, qpbind.Options{})
	defer bare.Release()
	for i := range run {
		w := new(WorkRequest)
		o := &run[i]
		opd := o.operands()
		if !bare.prepare(w, o.Op, &o.Local, &o.Remote, chain[i].wr.Deadline, nil, &opd, nil) {
			t.Fatal("prepare refused")
		}
		want := armedOf(&w.wr)
		w.finish(nil)
		if r.seen[i] != want || !r.done[i] {
			t.Fatalf("declined request %d armed as %+v (own completer %v), prepare arms %+v", i, r.seen[i], r.done[i], want)
		}
	}
	qp.Release() // waits for every operation's count
	if !drained(t, e.local, local) {
		t.Fatal("the local region still holds references after every operation was reported")
	}
}

// panicRoute is takeRoute whose RunInline panics (a route's bug).
type panicRoute struct{ takeRoute }

func (r *panicRoute) RunInline(uint64, buffer.Key, []qpbind.InlineOp, []error) (int, bool) {
	panic("route bug")
}

// A run whose RunInline panics is not stranded: its requests are posted
// as requests (PostOps posts the chain's armed requests as it unwinds),
// so they are reported and Release does not wait for them forever.
func TestRunInlinePanicPostsTheRun(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	defer e.qp.Release()
	r := &panicRoute{takeRoute{seeRoute: seeRoute{nullRoute: nullRoute{fakeRoute: *newFakeRoute()}}}}
	qp := newQueuePair(9, peerID, r, e.local, qpbind.Options{})
	cq := NewCompletionQueue(8)
	qp.SetCompletionQueue(cq)
	local := alloc(t, e.local, 16, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 16, buffer.AccessReadWrite)
	wrs := []*WorkRequest{new(WorkRequest), new(WorkRequest)}
	ops := []Op{PutOp(local, remote), GetOp(local, remote)}
	out := make([]*WorkRequest, 8)
	qp.PostOps(context.Background(), wrs, ops) // first use: prepare
	if n := cq.Poll(out); n != 2 {
		t.Fatalf("first use: reaped %d", n)
	}
	r.seen = nil
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the route's panic did not reach the poster")
			}
		}()
		qp.PostOps(context.Background(), wrs, ops)
	}()
	if n := cq.Poll(out); n != 2 || len(r.seen) != 2 || wrs[0].Err() != nil || wrs[1].Err() != nil {
		t.Fatalf("after the panic: reaped %d, %d posted as requests; want 2 and 2", n, len(r.seen))
	}
	done := make(chan struct{})
	go func() { qp.Release(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Release waits: the run's requests were left armed")
	}
	if !drained(t, e.local, local) {
		t.Fatal("the local region still holds references")
	}
}
