package queuepair

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

func TestSubmitSharesDeadline(t *testing.T) {
	e := newEnv(t, qpbind.Options{Timeout: time.Hour})
	local := alloc(t, e.local, 3000, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 3000, buffer.AccessReadWrite)
	var ops []Op
	for i := range uint64(3) {
		l, _ := local.Slice(i*1000, 1000)
		r, _ := remote.Slice(2000-i*1000, 1000)
		if i%2 == 0 {
			ops = append(ops, PutOp(l, r))
		} else {
			ops = append(ops, GetOp(l, r))
		}
	}
	dl := time.Now().Add(17 * time.Minute).Round(0)
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	b := e.qp.Submit(ctx, ops...)
	if len(b.Requests()) != 3 {
		t.Fatalf("%d requests", len(b.Requests()))
	}
	posted := []*backend.WorkRequest{e.route.next(t), e.route.next(t), e.route.next(t)}
	for i, wr := range posted {
		if !wr.Deadline.Equal(dl) {
			t.Fatalf("request %d deadline %v, want the ctx deadline %v", i, wr.Deadline, dl)
		}
		if wr.Op != ops[i].Op || wr.Remote != ops[i].Remote || uint64(len(wr.Local)) != ops[i].Local.Length {
			t.Fatalf("request %d: %v %v", i, wr.Op, wr.Remote)
		}
	}
	if done, err := b.Poll(); done || err != nil {
		t.Fatalf("batch poll before completion: %v %v", done, err)
	}
	complete(posted[0], nil)
	complete(posted[2], rdmamgr.ErrPeerGone)
	if done, _ := b.Poll(); done {
		t.Fatal("batch done with one request pending")
	}
	// Wait with an ended ctx cancels what is pending and reports it.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := b.Wait(cctx); !errors.Is(err, context.Canceled) || !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("batch wait with cancelled ctx: %v", err)
	}
	complete(posted[1], rdmamgr.ErrBadKey) // too late: already reported
	done, perr := b.Poll()
	if !done || !errors.Is(perr, rdmamgr.ErrPeerGone) || !errors.Is(perr, context.Canceled) || errors.Is(perr, rdmamgr.ErrBadKey) {
		t.Fatalf("batch poll: %v %v", done, perr)
	}
	werr := b.Wait(context.Background())
	if errs := werr.(interface{ Unwrap() []error }).Unwrap(); len(errs) != 2 {
		t.Fatalf("joined %d errors: %v", len(errs), werr)
	}
	if b.Requests()[0].Err() != nil || !errors.Is(b.Requests()[1].Err(), context.Canceled) {
		t.Fatal("per-request errors")
	}
	if !drained(t, e.local, local) {
		t.Fatal("local region still referenced")
	}
}

func TestSubmitDefaultDeadlineAndBadOp(t *testing.T) {
	const timeout = 3 * time.Hour
	e := newEnv(t, qpbind.Options{Timeout: timeout})
	local := alloc(t, e.local, 100, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 100, buffer.AccessRead)
	before := time.Now()
	b := e.qp.Submit(context.Background(), GetOp(local, remote), PutOp(local, remote), GetOp(local, remote))
	after := time.Now()
	wr1, wr3 := e.route.next(t), e.route.next(t)
	if !wr1.Deadline.Equal(wr3.Deadline) {
		t.Fatalf("deadlines differ: %v %v", wr1.Deadline, wr3.Deadline)
	}
	if !deadlineNear(wr1.Deadline, before, after, timeout) {
		t.Fatalf("deadline %v not now+%v", wr1.Deadline, timeout)
	}
	// The refused Put completed at once; the batch is not done.
	if d, err := b.Requests()[1].Poll(); !d || !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("put to read-only in batch: %v %v", d, err)
	}
	if d, _ := b.Poll(); d {
		t.Fatal("batch done early")
	}
	complete(wr1, nil)
	complete(wr3, nil)
	if err := b.Wait(context.Background()); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("batch: %v", err)
	}
	// An empty batch is done at once.
	if d, err := e.qp.Submit(context.Background()).Poll(); !d || err != nil {
		t.Fatalf("empty batch: %v %v", d, err)
	}
}

// Many goroutines post while another completes: run with -race.
func TestConcurrentPosts(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 1<<16, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 1<<16, buffer.AccessReadWrite)
	const goroutines, per = 8, 50
	stop := make(chan struct{})
	completerDone := make(chan struct{})
	go func() {
		defer close(completerDone)
		n := 0
		for n < goroutines*per {
			select {
			case wr := <-e.route.posted:
				var err error
				if n%7 == 0 {
					err = rdmamgr.ErrDeadline
				}
				complete(wr, err)
				n++
			case <-stop:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				off := uint64((g*per + i) % 64 * 1024)
				l, _ := local.Slice(off, 1024)
				r, _ := remote.Slice(off, 1024)
				var w *WorkRequest
				if i%2 == 0 {
					w = e.qp.Put(context.Background(), l, r)
				} else {
					w = e.qp.Get(context.Background(), l, r)
				}
				if err := w.Wait(context.Background()); err != nil && !errors.Is(err, rdmamgr.ErrDeadline) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-completerDone
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := len(e.route.accepted()); n != goroutines*per {
		t.Fatalf("%d posted", n)
	}
	if !drained(t, e.local, local) {
		t.Fatal("local region still referenced")
	}
}
