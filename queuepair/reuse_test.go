package queuepair

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// A caller-owned WorkRequest is reused across operations; each use is
// counted until it completes, so Release still waits for the pending one.
func TestReusedWorkRequest(t *testing.T) {
	onRel := make(chan struct{})
	e := newEnv(t, qpbind.Options{OnRelease: func() { close(onRel) }})
	local := alloc(t, e.local, 512, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 512, buffer.AccessReadWrite)
	var w WorkRequest
	if done, err := w.Poll(); done || err != nil {
		t.Fatalf("zero WorkRequest: %v %v", done, err)
	}
	for i := range 10 {
		if i%2 == 0 {
			e.qp.PostPut(context.Background(), &w, local, remote)
		} else {
			e.qp.PostGet(context.Background(), &w, local, remote)
		}
		wr := e.route.next(t)
		if wr.Op != [2]backend.Op{backend.OpWrite, backend.OpRead}[i%2] || wr.LocalRegion == nil {
			t.Fatalf("use %d: op %v region %v", i, wr.Op, wr.LocalRegion)
		}
		var want error
		if i == 3 {
			want = rdmamgr.ErrPeerGone
		}
		complete(wr, want)
		if err := w.Wait(context.Background()); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Fatalf("use %d: %v", i, err)
		}
	}
	// Re-arming a pending request is a caller bug.
	e.qp.PostPut(context.Background(), &w, local, remote)
	pending := e.route.next(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("re-arming a pending WorkRequest did not panic")
			}
		}()
		e.qp.PostGet(context.Background(), &w, local, remote)
	}()
	// A refused use does not count: Release waits only for the pending one.
	var refused WorkRequest
	e.qp.PostPut(context.Background(), &refused, local, local) // wrong peer
	if done, err := refused.Poll(); !done || !errors.Is(err, rdmamgr.ErrWrongPeer) {
		t.Fatalf("refused: %v %v", done, err)
	}
	relDone := make(chan struct{})
	go func() { e.qp.Release(); close(relDone) }()
	eventually(t, "release started", func() bool {
		var probe WorkRequest // new uses are refused once it did
		e.qp.PostGet(context.Background(), &probe, local, remote)
		if errors.Is(probe.Err(), rdmamgr.ErrReleased) {
			return true
		}
		complete(e.route.next(t), nil)
		return false
	})
	select {
	case <-onRel:
		t.Fatal("OnRelease with a reused request still pending")
	default:
	}
	complete(pending, nil)
	<-relDone
	<-onRel
	if err := w.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	// After Release the reusable request is refused, and can be reused.
	e.qp.PostPut(context.Background(), &w, local, remote)
	if done, err := w.Poll(); !done || !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("after release: %v %v", done, err)
	}
	if !drained(t, e.local, local) {
		t.Fatal("local region still referenced")
	}
}

// syncRoute completes every request inside Post, allocating nothing.
type syncRoute struct{ fakeRoute }

func (r *syncRoute) Post(wr *backend.WorkRequest) error {
	wr.Done.Complete(wr, nil)
	return nil
}

// The queue pair's own bookkeeping (including the count Release waits on)
// allocates nothing per reused operation.
func TestReusedWorkRequestAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation count is not meaningful under -race")
	}
	// Complete, and CompleteInline (its record of each post preallocated).
	for _, route := range []backend.Route{&syncRoute{}, &inlineRoute{fakeRoute: *newFakeRoute(), seen: make([]armed, 0, 1024)}} {
		testReusedWorkRequestAllocs(t, route)
	}
}

func testReusedWorkRequestAllocs(t *testing.T, route backend.Route) {
	e := newEnv(t, qpbind.Options{})
	qp := newQueuePair(1, peerID, route, e.local, qpbind.Options{})
	local := alloc(t, e.local, 4096, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 4096, buffer.AccessReadWrite)
	var w WorkRequest
	ctx := context.Background()
	run := func() {
		qp.PostPut(ctx, &w, local, remote)
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		qp.PostGet(ctx, &w, local, remote)
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if a := testing.AllocsPerRun(200, run); a != 0 {
		t.Fatalf("%.2f allocations per put+get, want 0", a)
	}
	qp.Release()
}
