package queuepair

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// A chain's request re-posted on the same queue pair takes armFast (no
// prepare, no reset): it must arm the request exactly as prepare does, and
// refuse to re-arm one its queue still holds, as reset does; with no ctx
// and with one that may end (its Done channel given to the route), and a
// ctx that ended before the chain posts nothing.
func TestArmFastAsPrepare(t *testing.T) {
	t.Run("background", func(t *testing.T) { testArmFastAsPrepare(t, context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Run("live ctx", func(t *testing.T) { testArmFastAsPrepare(t, ctx) })
	cancel()
	t.Run("ended ctx", func(t *testing.T) { testArmFastAsPrepare(t, ctx) })
}

func testArmFastAsPrepare(t *testing.T, ctx context.Context) {
	e := newEnv(t, qpbind.Options{})
	defer e.qp.Release()
	r := &seeRoute{nullRoute: nullRoute{fakeRoute: *newFakeRoute()}}
	qp := newQueuePair(9, peerID, r, e.local, qpbind.Options{})
	defer qp.Release()
	cq := NewCompletionQueue(4)
	qp.SetCompletionQueue(cq)
	local := alloc(t, e.local, 16, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 16, buffer.AccessReadWrite)
	l0, _ := local.Slice(0, 8)
	l1, _ := local.Slice(8, 8)
	r0, _ := remote.Slice(0, 8)
	r1, _ := remote.Slice(8, 8)
	wrs := []*WorkRequest{new(WorkRequest), new(WorkRequest)}
	out := make([]*WorkRequest, 4)
	post := func(ctx context.Context, ops []Op) {
		t.Helper()
		qp.PostOps(ctx, wrs, ops)
		if n := cq.Poll(out); n != len(ops) {
			t.Fatalf("reaped %d, want %d", n, len(ops))
		}
	}
	post(context.Background(), []Op{PutOp(l0, r0), GetOp(l1, r1)}) // first use: prepare
	ops := []Op{GetOp(l1, r1), PutOp(l0, r0)}
	if ctx.Err() != nil {
		r.seen = nil
		post(ctx, ops)
		for i, w := range wrs {
			if !errors.Is(w.Err(), context.Canceled) {
				t.Fatalf("request %d under an ended ctx: %v", i, w.Err())
			}
		}
		if len(r.seen) != 0 {
			t.Fatalf("the route saw %d requests of a chain whose ctx had ended", len(r.seen))
		}
		return
	}
	c := postCtx(ctx)
	ops[0].ID, ops[1].ID, ops[1].Imm = 7, 8, 3
	// What prepare makes of them, on requests of their own (on a queue
	// pair of the same route without the queue).
	bare := newQueuePair(10, peerID, r, e.local, qpbind.Options{})
	defer bare.Release()
	var want [2]armed
	for i := range ops {
		w := new(WorkRequest)
		o := &ops[i]
		opd := o.operands()
		if !bare.prepare(w, o.Op, &o.Local, &o.Remote, wrs[i].wr.Deadline, c, &opd, nil) {
			t.Fatal("prepare refused")
		}
		want[i] = armedOf(&w.wr)
		w.finish(nil)
	}
	// The chain's second use, through armFast, seen as the route gets it.
	r.seen, r.done = nil, nil
	fast := 0
	testHookArmFast = func() { fast++ }
	defer func() { testHookArmFast = nil }()
	post(ctx, ops)
	// All but the first: a chain's first request takes the references to
	// its local region for the chain (prepare, LocalRun.Acquire).
	if fast != len(ops)-1 {
		t.Fatalf("armFast armed %d of the chain's %d requests, want all but the first", fast, len(ops))
	}
	if len(r.seen) != 2 {
		t.Fatalf("route saw %d requests", len(r.seen))
	}
	for i, got := range r.seen {
		if got != want[i] {
			t.Fatalf("request %d armed as %+v, prepare arms %+v", i, got, want[i])
		}
		if !r.done[i] {
			t.Fatalf("request %d: Done is not its own completer", i)
		}
		if wrs[i].ID() != ops[i].ID || wrs[i].Err() != nil {
			t.Fatalf("request %d: ID %d, err %v", i, wrs[i].ID(), wrs[i].Err())
		}
	}
	// Done and queued, not reaped: re-posting it panics, and the chain's
	// requests before it are posted.
	qp.PostOps(context.Background(), wrs, ops)
	if n := cq.Poll(out[:1]); n != 1 || out[0] != wrs[0] {
		t.Fatalf("reaped %d", n)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("re-posting a request its queue still holds did not panic")
			}
		}()
		qp.PostOps(context.Background(), wrs, ops)
	}()
	if n := cq.Poll(out); n != 2 || out[0] != wrs[1] || out[1] != wrs[0] || wrs[0].Err() != nil || wrs[1].Err() != nil {
		t.Fatalf("after the refused re-post: reaped %d", n)
	}
}

// armed is what a route sees of a request, but its deadline (from the
// coarse clock, which may tick between two arms) and its Done.
type armed struct {
	op                 backend.Op
	local              *byte
	n                  int
	region             any
	remote             buffer.Buffer
	cancel             <-chan struct{}
	imm                uint32
	hasImm             bool
	compare, swap, res uint64
	via                uint16
	origin             uint64
	cause              error
}

func armedOf(wr *backend.WorkRequest) armed {
	return armed{wr.Op, &wr.Local[0], len(wr.Local), wr.LocalRegion, wr.Remote, wr.Cancel, wr.Imm, wr.HasImm,
		wr.Compare, wr.Swap, wr.Result, wr.Via, wr.Origin, wr.CancelCause()}
}

// seeRoute is nullRoute that records what it is given.
type seeRoute struct {
	nullRoute
	seen []armed
	done []bool // Done is the request's own completer
}

func (r *seeRoute) PostList(wrs []*backend.WorkRequest) (int, error) {
	for _, wr := range wrs {
		r.seen = append(r.seen, armedOf(wr))
		c, ok := wr.Done.(*completer)
		r.done = append(r.done, ok && &(*WorkRequest)(c).wr == wr)
	}
	return r.nullRoute.PostList(wrs)
}
