package queuepair

import (
	"context"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// A chain on a route that posts chains, with a request that is pending
// (here: the same one twice): PostOps panics, as documented, but the
// requests before it were posted as a loop of posts would have posted
// them, so they complete and Release returns. It failed before: the
// earlier requests were armed (pending, counted, holding their memory)
// and never posted, and Release waited for them forever.
func TestPostOpsPanicPostsTheRest(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	r := &listRoute{fakeRoute: *newFakeRoute(), failAt: -1}
	qp := newQueuePair(8, peerID, r, e.local, qpbind.Options{})
	stop := completeAll(&r.fakeRoute)
	defer stop()
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	w0, w1 := new(WorkRequest), new(WorkRequest)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("PostOps with a request twice did not panic")
			}
		}()
		qp.PostOps(context.Background(), []*WorkRequest{w0, w1, w1}, []Op{PutOp(local, remote), GetOp(local, remote), PutOp(local, remote)})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, w := range []*WorkRequest{w0, w1} {
		if err := w.Wait(ctx); err != nil {
			t.Fatalf("request %d before the bad one: %v", i, err)
		}
	}
	released := make(chan struct{})
	go func() { qp.Release(); close(released) }()
	select {
	case <-released:
	case <-ctx.Done():
		t.Fatal("Release did not return: a request of the chain was left armed")
	}
}
