package queuepair

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// slowRoute is a fakeRoute that says its completions are slow
// (backend.SlowCompleter), as the host agent's routes do.
type slowRoute struct{ *fakeRoute }

func (slowRoute) SlowCompletions() bool { return true }

// spun reports whether a wait spun since resetSpin: an outcome that comes
// after spinFor makes a spinning wait miss, which starts the backoff.
func spun() bool { return spinMissN.Load() != 0 || spinSkip.Load() != 0 }

// A queue pair on a route whose completions are slow never spins: neither
// a WorkRequest's Wait nor its completion queue's (the outcome comes after
// spinFor: a wait that spun would miss and start the backoff). The same
// waits on a fast route do spin (the check can fail).
func TestSlowRouteNeverSpins(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	e := newEnv(t, qpbind.Options{})
	defer e.qp.Release()
	slow := slowRoute{newFakeRoute()}
	sq := newQueuePair(8, peerID, slow, e.local, qpbind.Options{})
	defer sq.Release()
	if e.qp.slow || !sq.slow {
		t.Fatalf("slow read at bind: fast route %v, slow route %v", e.qp.slow, sq.slow)
	}
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	later := func(r *fakeRoute) {
		wr := r.next(t)
		go func() {
			time.Sleep(20 * spinFor)
			complete(wr, nil)
		}()
	}
	waitOne := func(q *QueuePair, r *fakeRoute) {
		t.Helper()
		w := q.Put(ctx, local, remote)
		later(r)
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cqOne := func(q *QueuePair, r *fakeRoute) {
		t.Helper()
		cq := NewCompletionQueue(4)
		q.SetCompletionQueue(cq)
		defer q.SetCompletionQueue(nil)
		w := q.Put(ctx, local, remote)
		later(r)
		out := make([]*WorkRequest, 4)
		if n, err := cq.Wait(ctx, out); err != nil || n != 1 || out[0] != w {
			t.Fatalf("cq.Wait: %d, %v", n, err)
		}
		if cq.fast.Load() != 0 {
			t.Fatalf("%d fast slots held after the reap", cq.fast.Load())
		}
	}
	for _, c := range []struct {
		name string
		wait func(*QueuePair, *fakeRoute)
	}{{"WorkRequest.Wait", waitOne}, {"CompletionQueue.Wait", cqOne}} {
		// The fast route's wait spins unless the outcome came before it
		// began (the test goroutine descheduled past the completer's
		// sleep, under load): any of a few tries shows it.
		fastSpun := false
		for try := 0; try < 10 && !fastSpun; try++ {
			resetSpin(t)
			c.wait(e.qp, e.route)
			fastSpun = spun()
		}
		if !fastSpun {
			t.Errorf("%s on a fast route did not spin in 10 tries", c.name)
		}
		resetSpin(t)
		c.wait(sq, slow.fakeRoute)
		if spun() {
			t.Errorf("%s on a slow route spun", c.name)
		}
	}
}
