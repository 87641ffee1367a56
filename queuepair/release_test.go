package queuepair

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

func TestPostErrorPropagates(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	for _, perr := range []error{rdmamgr.ErrPeerGone, rdmamgr.ErrClosed, fmt.Errorf("in flight: %w", rdmamgr.ErrLimit)} {
		e.route.setPostErr(perr)
		w := e.qp.Put(local, remote)
		done, err := w.Poll()
		if !done || !errors.Is(err, perr) {
			t.Fatalf("post error %v: got %v %v", perr, done, err)
		}
	}
	if n := len(e.route.accepted()); n != 0 {
		t.Fatalf("%d requests accepted", n)
	}
	if !drained(t, e.local, local) {
		t.Fatal("a request refused by the route kept a reference on the local region")
	}
}

func TestRelease(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); e.qp.Release() }()
	}
	wg.Wait()
	e.qp.Release()
	if n := e.releases(); n != 1 {
		t.Fatalf("OnRelease called %d times", n)
	}
	for _, w := range []*WorkRequest{e.qp.Put(local, remote), e.qp.Get(local, remote)} {
		if done, err := w.Poll(); !done || !errors.Is(err, rdmamgr.ErrReleased) {
			t.Fatalf("op after release: %v %v", done, err)
		}
	}
	if e.route.calls() != 0 {
		t.Fatal("released queue pair posted")
	}
	b := e.qp.Submit(context.Background(), PutOp(local, remote), GetOp(local, remote))
	if done, err := b.Poll(); !done || !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("batch after release: %v %v", done, err)
	}
}

// Release lets operations already posted complete normally, and gives the
// queue pair back (OnRelease) only once they have.
func TestReleaseWaitsForPosted(t *testing.T) {
	onRel := make(chan struct{})
	e := newEnv(t, qpbind.Options{OnRelease: func() { close(onRel) }})
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	w1 := e.qp.Put(local, remote)
	w2 := e.qp.Get(local, remote)
	wr1, wr2 := e.route.next(t), e.route.next(t)

	relDone := make(chan struct{})
	go func() { e.qp.Release(); close(relDone) }()
	// New operations are refused as soon as Release started.
	eventually(t, "release started", func() bool {
		if err := e.qp.Put(local, remote).Err(); errors.Is(err, rdmamgr.ErrReleased) {
			return true
		}
		complete(e.route.next(t), nil) // posted before Release took effect
		return false
	})
	select {
	case <-onRel:
		t.Fatal("OnRelease before posted operations completed")
	case <-relDone:
		t.Fatal("Release returned before posted operations completed")
	default:
	}
	complete(wr1, nil)
	select {
	case <-onRel:
		t.Fatal("OnRelease with an operation still posted")
	default:
	}
	complete(wr2, rdmamgr.ErrDeadline)
	<-relDone
	<-onRel
	if err := w1.Err(); err != nil {
		t.Fatalf("posted put: %v", err)
	}
	if err := w2.Err(); !errors.Is(err, rdmamgr.ErrDeadline) {
		t.Fatalf("posted get: %v", err)
	}
	if n := e.releases(); n != 1 {
		t.Fatalf("OnRelease called %d times", n)
	}
}
