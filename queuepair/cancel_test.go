package queuepair

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

func TestWaitContext(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 100, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 100, buffer.AccessReadWrite)

	// A cancelled ctx cancels the operation; Wait returns its outcome.
	w := e.qp.Get(local, remote)
	wr := e.route.next(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := w.Wait(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with cancelled ctx: %v", err)
	}
	if got := <-e.route.cancels; got != wr {
		t.Fatal("Cancel not called with the posted request")
	}
	if done, perr := w.Poll(); !done || perr != err {
		t.Fatalf("poll after wait: %v %v, want %v", done, perr, err)
	}

	// A passed deadline: the error matches both deadline sentinels.
	w = e.qp.Get(local, remote)
	e.route.next(t)
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	err = w.Wait(dctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, rdmamgr.ErrDeadline) {
		t.Fatalf("wait with expired ctx: %v", err)
	}
	<-e.route.cancels

	// Wait does not return before the backend completed the request (it
	// may still be touching the memory), and then reports what it said.
	e.route.holdCancel = true
	local2 := alloc(t, e.local, 100, buffer.AccessReadWrite)
	w = e.qp.Get(local2, remote)
	wr = e.route.next(t)
	res := make(chan error, 1)
	go func() { res <- w.Wait(dctx) }()
	if got := <-e.route.cancels; got != wr {
		t.Fatal("Cancel not called with the posted request")
	}
	select {
	case err := <-res:
		t.Fatalf("wait returned %v before the backend completed the request", err)
	case <-time.After(50 * time.Millisecond):
	}
	if drained(t, e.local, local2) { // starts the release: no new work on local2
		t.Fatal("local region released while the backend holds it")
	}
	complete(wr, nil) // it finished before the cancel took effect
	if err := <-res; err != nil {
		t.Fatalf("wait after completion: %v", err)
	}
	if done, err := w.Poll(); !done || err != nil {
		t.Fatalf("poll: %v %v", done, err)
	}

	// Cancel ends it the same way.
	e.route.holdCancel = false
	w = e.qp.Put(local, remote)
	e.route.next(t)
	if err := w.Cancel(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: %v", err)
	}
	<-e.route.cancels
	if err := w.Cancel(); !errors.Is(err, context.Canceled) {
		t.Fatalf("second cancel: %v", err)
	}
	select {
	case <-e.route.cancels:
		t.Fatal("a completed request was cancelled again")
	default:
	}
}

// Submit's ctx cancels its operations when it ends, with nobody waiting.
func TestSubmitContextCancels(t *testing.T) {
	e := newEnv(t, qpbind.Options{Timeout: time.Hour})
	local := alloc(t, e.local, 200, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 200, buffer.AccessReadWrite)
	l1, _ := local.Slice(0, 100)
	l2, _ := local.Slice(100, 100)
	r1, _ := remote.Slice(0, 100)
	r2, _ := remote.Slice(100, 100)
	ctx, cancel := context.WithCancel(context.Background())
	b := e.qp.Submit(ctx, GetOp(l1, r1), PutOp(l2, r2))
	first, second := e.route.next(t), e.route.next(t)
	complete(first, nil)
	cancel()
	if got := <-e.route.cancels; got != second {
		t.Fatal("the pending request was not cancelled")
	}
	eventually(t, "batch done", func() bool { done, _ := b.Poll(); return done })
	if b.Requests()[0].Err() != nil || !errors.Is(b.Requests()[1].Err(), context.Canceled) {
		t.Fatalf("outcomes: %v, %v", b.Requests()[0].Err(), b.Requests()[1].Err())
	}
	select {
	case <-e.route.cancels:
		t.Fatal("a completed request was cancelled")
	default:
	}
	// A ctx that ended before Submit: nothing is posted.
	b = e.qp.Submit(ctx, GetOp(l1, r1))
	if err := b.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("submit with ended ctx: %v", err)
	}
	if !drained(t, e.local, local) {
		t.Fatal("local region still referenced")
	}
}
