package queuepair

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// inlineRoute completes every request inside its Post, as shm's inline
// copy does (through CompleteInline), recording what it was given.
type inlineRoute struct {
	fakeRoute
	seen []armed
	err  error // the outcome it reports
}

func (r *inlineRoute) Post(wr *backend.WorkRequest) error {
	r.seen = append(r.seen, armedOf(wr))
	wr.Done.(qpbind.InlineCompleter).CompleteInline(wr, r.err)
	return nil
}

// A Put or Get posted on its own and re-posted on the same queue pair
// takes armOne (no prepare, no reset): the route must get the request
// exactly as prepare arms it, through a completion queue or not, under no
// ctx and one that may end; a ctx that ended, an observer, a full queue
// or a handle in another region leave it to prepare, which reports or
// arms it as before.
func TestArmOneAsPrepare(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		cq   bool
	}{{"background", context.Background(), false}, {"live ctx", ctx, false}, {"cq", context.Background(), true}, {"cq live ctx", ctx, true}} {
		t.Run(tc.name, func(t *testing.T) { testArmOneAsPrepare(t, tc.ctx, tc.cq) })
	}
}

func testArmOneAsPrepare(t *testing.T, ctx context.Context, withCQ bool) {
	e := newEnv(t, qpbind.Options{})
	defer e.qp.Release()
	r := &inlineRoute{fakeRoute: *newFakeRoute()}
	qp := newQueuePair(9, peerID, r, e.local, qpbind.Options{})
	defer qp.Release()
	var cq *CompletionQueue
	if withCQ {
		cq = NewCompletionQueue(4)
		qp.SetCompletionQueue(cq)
	}
	reap := func(w *WorkRequest) {
		t.Helper()
		if cq == nil {
			return
		}
		out := make([]*WorkRequest, 2)
		if n := cq.Poll(out); n != 1 || out[0] != w {
			t.Fatalf("reaped %d", n)
		}
	}
	local := alloc(t, e.local, 16, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 16, buffer.AccessReadWrite)
	l1, _ := local.Slice(8, 8)
	r0, _ := remote.Slice(0, 8)
	n := 0
	testHookArmOne = func() { n++ }
	defer func() { testHookArmOne = nil }()
	var w WorkRequest
	qp.PostPut(ctx, &w, l1, r0) // first use: prepare
	if err := w.Wait(ctx); err != nil || n != 0 {
		t.Fatalf("first post: %v, armOne armed %d", err, n)
	}
	reap(&w)
	// What prepare makes of a Get, on a request of its own.
	bare := newQueuePair(10, peerID, r, e.local, qpbind.Options{})
	defer bare.Release()
	var pw WorkRequest
	if !bare.prepare(&pw, backend.OpRead, &l1, &r0, time.Time{}, postCtx(ctx), &operands{}, nil) {
		t.Fatal("prepare refused")
	}
	want := armedOf(&pw.wr)
	pw.finish(nil)
	r.seen = nil
	for i := range 3 {
		qp.PostGet(ctx, &w, l1, r0)
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		reap(&w)
		if n != i+1 || len(r.seen) != i+1 || r.seen[i] != want {
			t.Fatalf("re-post %d: armOne armed %d, route saw %+v, prepare arms %+v", i, n, r.seen, want)
		}
		if w.ref.Held() || w.qp != nil || w.cq != nil {
			t.Fatalf("re-post %d: done still holding its local memory (%v), queue pair or queue", i, w.ref.Held())
		}
		if dl := time.Until(w.wr.Deadline); dl < DefaultTimeout-time.Second || dl > DefaultTimeout+time.Second {
			t.Fatalf("re-post %d: deadline %v from now, want about %v", i, dl, DefaultTimeout)
		}
	}
	// PostOps of one operation: the same, with its ID.
	op := GetOp(l1, r0)
	op.ID = 9
	qp.PostOps(ctx, []*WorkRequest{&w}, []Op{op})
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	reap(&w)
	if n != 4 || len(r.seen) != 4 || r.seen[3] != want || w.ID() != 9 {
		t.Fatalf("PostOps of one: armOne armed %d, route saw %+v, ID %d", n, r.seen[len(r.seen)-1], w.ID())
	}
	if qp.ops.Users() != 0 {
		t.Fatalf("%d operations still counted on the queue pair", qp.ops.Users())
	}
	// A failure is reported as such, through the same path.
	r.err = rdmamgr.ErrAccess
	qp.PostPut(ctx, &w, l1, r0)
	if err := w.Wait(ctx); !errors.Is(err, rdmamgr.ErrAccess) || n != 5 {
		t.Fatalf("failed re-post: %v, armOne armed %d", err, n)
	}
	reap(&w)
	r.err = nil
	// A handle in another region: prepare arms it (and remembers the
	// region), then armOne again.
	other := alloc(t, e.local, 8, buffer.AccessReadWrite)
	qp.PostPut(ctx, &w, other, r0)
	if err := w.Wait(ctx); err != nil || n != 5 {
		t.Fatalf("post from another region: %v, armOne armed %d (want it left to prepare)", err, n)
	}
	reap(&w)
	qp.PostPut(ctx, &w, other, r0)
	if err := w.Wait(ctx); err != nil || n != 6 {
		t.Fatalf("re-post in that region: %v, armOne armed %d", err, n)
	}
	reap(&w)
	// A checks failure is prepare's to report.
	ro := r0
	ro.Access = buffer.AccessRead
	qp.PostPut(ctx, &w, l1, ro)
	if err := w.Wait(ctx); !errors.Is(err, rdmamgr.ErrAccess) || n != 6 {
		t.Fatalf("a Put to a read-only handle: %v, armOne armed %d", err, n)
	}
	reap(&w)
	if cq != nil { // a full queue: prepare reports it
		var hold [4]WorkRequest
		for i := range hold {
			qp.PostGet(ctx, &hold[i], l1, r0)
		}
		qp.PostPut(ctx, &w, l1, r0)
		if err := w.Wait(ctx); !errors.Is(err, rdmamgr.ErrLimit) {
			t.Fatalf("post on a full queue: %v", err)
		}
		out := make([]*WorkRequest, 4)
		if k := cq.Poll(out); k != 4 {
			t.Fatalf("reaped %d of the 4 that filled the queue", k)
		}
	}
}

// A ctx that ended, or an observer, leave a re-post to prepare.
func TestArmOneDeclines(t *testing.T) {
	for _, tc := range []string{"ended ctx", "observer", "Done called"} {
		t.Run(tc, func(t *testing.T) {
			var opt qpbind.Options
			if tc == "observer" {
				opt.Observer = countObserver{new(int)}
			}
			e := newEnv(t, qpbind.Options{})
			defer e.qp.Release()
			r := &inlineRoute{fakeRoute: *newFakeRoute()}
			qp := newQueuePair(9, peerID, r, e.local, opt)
			defer qp.Release()
			local := alloc(t, e.local, 8, buffer.AccessReadWrite)
			remote := alloc(t, e.remote, 8, buffer.AccessReadWrite)
			n := 0
			testHookArmOne = func() { n++ }
			defer func() { testHookArmOne = nil }()
			var w WorkRequest
			qp.PostPut(context.Background(), &w, local, remote)
			if err := w.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			switch tc {
			case "ended ctx":
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				qp.PostPut(ctx, &w, local, remote)
				if err := w.Wait(context.Background()); !errors.Is(err, context.Canceled) {
					t.Fatalf("post under an ended ctx: %v", err)
				}
				if len(r.seen) != 1 {
					t.Fatalf("the route saw %d posts, want the first only", len(r.seen))
				}
			case "observer":
				qp.PostPut(context.Background(), &w, local, remote)
				if err := w.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
				if got := *opt.Observer.(countObserver).n; got != 2 {
					t.Fatalf("observer saw %d operations, want 2", got)
				}
			case "Done called": // a token per completion, sent by CompleteInline
				done := w.Done()
				<-done
				for range 3 {
					qp.PostPut(context.Background(), &w, local, remote)
					select {
					case <-done:
					case <-time.After(10 * time.Second):
						t.Fatal("no token on Done for an inline completion")
					}
				}
				select {
				case <-done:
					t.Fatal("a second token")
				default:
				}
			}
			if n != 0 {
				t.Fatalf("armOne armed %d", n)
			}
		})
	}
}

type countObserver struct{ n *int }

func (o countObserver) Observe(backend.Kind, backend.Op, uint64, time.Duration, error) { *o.n++ }
