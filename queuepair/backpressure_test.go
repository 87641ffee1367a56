package queuepair

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// TestPostWaitsUnderCallerContext: at the route's in-flight limit every
// verb waits for room under the caller's ctx. Cancelling ctx makes the
// call return and the operation complete with ctx's error, nothing posted,
// long before the queue pair's timeout (an hour here; the old verbs, which
// took no ctx, waited for it). A ctx that already ended posts nothing.
func TestPostWaitsUnderCallerContext(t *testing.T) {
	e := newEnv(t, qpbind.Options{Timeout: time.Hour})
	e.route.mu.Lock()
	e.route.full = true
	e.route.mu.Unlock()
	local := alloc(t, e.local, 8, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 8, buffer.AccessReadWrite|buffer.AccessNotify|buffer.AccessAtomic)
	verbs := map[string]func(ctx context.Context) *WorkRequest{
		"Put":            func(ctx context.Context) *WorkRequest { return e.qp.Put(ctx, local, remote) },
		"Get":            func(ctx context.Context) *WorkRequest { return e.qp.Get(ctx, local, remote) },
		"PutWithImm":     func(ctx context.Context) *WorkRequest { return e.qp.PutWithImm(ctx, local, remote, 1) },
		"Send":           func(ctx context.Context) *WorkRequest { return e.qp.Send(ctx, local) },
		"SendWithImm":    func(ctx context.Context) *WorkRequest { return e.qp.SendWithImm(ctx, local, 1) },
		"CompareAndSwap": func(ctx context.Context) *WorkRequest { return e.qp.CompareAndSwap(ctx, remote, 0, 1) },
		"FetchAdd":       func(ctx context.Context) *WorkRequest { return e.qp.FetchAdd(ctx, remote, 1) },
		"PostPut": func(ctx context.Context) *WorkRequest {
			w := new(WorkRequest)
			e.qp.PostPut(ctx, w, local, remote)
			return w
		},
		"PostGet": func(ctx context.Context) *WorkRequest {
			w := new(WorkRequest)
			e.qp.PostGet(ctx, w, local, remote)
			return w
		},
		"Submit": func(ctx context.Context) *WorkRequest {
			return e.qp.Submit(ctx, PutOp(local, remote)).Requests()[0]
		},
	}
	for name, post := range verbs {
		t.Run(name, func(t *testing.T) {
			before := e.route.calls()
			ctx, cancel := context.WithCancel(context.Background())
			got := make(chan *WorkRequest, 1)
			go func() { got <- post(ctx) }()
			// The call is inside the route's Post, waiting for room.
			eventually(t, "post reaches the full route", func() bool { return e.route.calls() > before })
			select {
			case <-got:
				t.Fatal("returned while the route had no room and ctx was live")
			default:
			}
			cancel()
			var w *WorkRequest
			select {
			case w = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("still waiting for room after ctx was cancelled")
			}
			done, err := w.Poll()
			if !done || !errors.Is(err, context.Canceled) {
				t.Fatalf("after cancel: done %v err %v; want done with context.Canceled", done, err)
			}
			if n := len(e.route.accepted()); n != 0 {
				t.Fatalf("%d requests accepted by the full route", n)
			}

			// A ctx that already ended: nothing reaches the route.
			before = e.route.calls()
			if err := post(ctx).Wait(context.Background()); !errors.Is(err, context.Canceled) {
				t.Fatalf("with an ended ctx: %v; want context.Canceled", err)
			}
			if e.route.calls() != before {
				t.Fatal("an ended ctx still called the route's Post")
			}
		})
	}
	// The queue pair serves again once the route has room.
	e.route.mu.Lock()
	e.route.full = false
	e.route.mu.Unlock()
	w := e.qp.Put(context.Background(), local, remote)
	complete(e.route.next(t), nil)
	if err := w.Wait(context.Background()); err != nil {
		t.Fatalf("put with room: %v", err)
	}
}
