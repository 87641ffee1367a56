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

// listRoute is a fakeRoute that posts chains, counting them, and completes
// every request from a goroutine of its own.
type listRoute struct {
	fakeRoute
	mu     sync.Mutex
	lists  int
	failAt int // PostList refuses the request at this index of the next list (-1: none)
}

func (r *listRoute) PostList(wrs []*backend.WorkRequest) (int, error) {
	r.mu.Lock()
	r.lists++
	at := r.failAt
	r.failAt = -1
	r.mu.Unlock()
	for i, wr := range wrs {
		if i == at {
			return i, rdmamgr.ErrPeerGone
		}
		r.posted <- wr
	}
	return len(wrs), nil
}

// completeAll completes everything posted on r until stop, from its own
// goroutine; the returned wait waits for it.
func completeAll(r *fakeRoute) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case wr := <-r.posted:
				wr.Done.Complete(wr, nil)
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// Many operations over two queue pairs sharing one queue: every post is
// reported exactly once, re-posting each reaped request at once.
func TestCQSharedByTwoQueuePairs(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	r2 := &listRoute{fakeRoute: *newFakeRoute(), failAt: -1}
	qp2 := newQueuePair(8, peerID, r2, e.local, qpbind.Options{})
	defer qp2.Release()
	defer e.qp.Release()
	stop1, stop2 := completeAll(e.route), completeAll(&r2.fakeRoute)
	defer stop2()
	defer stop1()
	cq := NewCompletionQueue(32)
	e.qp.SetCompletionQueue(cq)
	qp2.SetCompletionQueue(cq)
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	const total = 2000
	wrs := make([]*WorkRequest, 32)
	ops := make([]Op, 32)
	for i := range wrs {
		wrs[i] = new(WorkRequest)
		ops[i] = PutOp(local, remote)
		if i%2 == 1 {
			ops[i] = GetOp(local, remote)
		}
	}
	posts := map[*WorkRequest]int{}
	for i := range wrs {
		posts[wrs[i]]++
	}
	e.qp.PostOps(context.Background(), wrs[:16], ops[:16])
	qp2.PostOps(context.Background(), wrs[16:], ops[16:])
	sent, reported := 32, 0
	out := make([]*WorkRequest, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for reported < total {
		n, err := cq.Wait(ctx, out)
		if err != nil {
			t.Fatalf("after %d reports: %v", reported, err)
		}
		for _, w := range out[:n] {
			if done, err := w.Poll(); !done || err != nil {
				t.Fatalf("reported request: done %v err %v", done, err)
			}
			if posts[w]--; posts[w] < 0 {
				t.Fatal("a request reported more often than posted")
			}
			reported++
			if sent < total {
				q := e.qp
				if sent%2 == 0 {
					q = qp2
				}
				q.PostOps(context.Background(), []*WorkRequest{w}, []Op{GetOp(local, remote)})
				posts[w]++
				sent++
			}
		}
	}
	for w, n := range posts {
		if n != 0 {
			t.Fatalf("request %p: %d posts not reported", w, n)
		}
	}
	if n := cq.Poll(out); n != 0 {
		t.Fatalf("%d extra reports", n)
	}
	r2.mu.Lock()
	lists := r2.lists
	r2.mu.Unlock()
	if lists == 0 {
		t.Fatal("PostOps did not use the route's PostList")
	}
}

// A chain whose route refuses one request mid-list: that one fails with
// the route's error, the rest are posted on and succeed.
func TestPostOpsListRefusedMidway(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	r := &listRoute{fakeRoute: *newFakeRoute(), failAt: 1}
	qp := newQueuePair(8, peerID, r, e.local, qpbind.Options{})
	defer qp.Release()
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	wrs := []*WorkRequest{new(WorkRequest), new(WorkRequest), new(WorkRequest)}
	qp.PostOps(context.Background(), wrs, []Op{PutOp(local, remote), PutOp(local, remote), GetOp(local, remote)})
	if done, err := wrs[1].Poll(); !done || !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("refused request: %v %v", done, err)
	}
	for _, i := range []int{0, 2} {
		wr := r.next(t)
		if wr != &wrs[i].wr {
			t.Fatalf("posted out of order at %d", i)
		}
		complete(wr, nil)
		if err := wrs[i].Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if r.lists != 2 {
		t.Fatalf("%d PostList calls, want 2 (the rest posted as a chain again)", r.lists)
	}
}

// Wait on an empty queue returns the context's error.
func TestCQWaitContext(t *testing.T) {
	cq := NewCompletionQueue(4)
	out := make([]*WorkRequest, 4)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if n, err := cq.Wait(ctx, out); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on cancel: %d, %v", n, err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer dcancel()
	if n, err := cq.Wait(dctx, out); n != 0 || !errors.Is(err, rdmamgr.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past the deadline: %d, %v", n, err)
	}
}

// A full queue refuses the next post at once with ErrLimit (reported only
// through its WorkRequest); reaping frees the slot; a reaped request can
// be re-posted at once, and one not yet reaped cannot.
func TestCQFullAndRepost(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	cq := NewCompletionQueue(2)
	e.qp.SetCompletionQueue(cq)
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	a, b, c := new(WorkRequest), new(WorkRequest), new(WorkRequest)
	e.qp.PostOps(context.Background(), []*WorkRequest{a, b, c}, []Op{PutOp(local, remote), PutOp(local, remote), PutOp(local, remote)})
	if done, err := c.Poll(); !done || !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("third on a queue of 2: %v %v", done, err)
	}
	wa, wb := e.route.next(t), e.route.next(t)
	complete(wa, nil)
	if err := a.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	func() { // done, but not reaped: re-arming it would lose its report
		defer func() {
			if recover() == nil {
				t.Fatal("re-posting a request the queue has not reported did not panic")
			}
		}()
		e.qp.PostPut(context.Background(), a, local, remote)
	}()
	out := make([]*WorkRequest, 4)
	if n := cq.Poll(out); n != 1 || out[0] != a {
		t.Fatalf("Poll: %d %v", n, out[:n])
	}
	e.qp.PostPut(context.Background(), a, local, remote) // reaped: at once
	e.qp.PostPut(context.Background(), c, local, remote) // b and a hold both slots
	if !errors.Is(c.Err(), rdmamgr.ErrLimit) {
		t.Fatalf("post on a full queue: %v", c.Err())
	}
	complete(wb, rdmamgr.ErrPeerGone)
	complete(e.route.next(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := map[*WorkRequest]error{}
	for len(got) < 2 {
		n, err := cq.Wait(ctx, out)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range out[:n] {
			got[w] = w.Err()
		}
	}
	if got[a] != nil || !errors.Is(got[b], rdmamgr.ErrPeerGone) {
		t.Fatalf("outcomes: a %v, b %v", got[a], got[b])
	}
	e.qp.Release()
}

// Reported means finished: while an outcome is being reported the queue
// hands nothing over, and once it does, the local memory is released and
// the request done.
func TestCQReportedMeansFinished(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	cq := NewCompletionQueue(4)
	e.qp.SetCompletionQueue(cq)
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	out := make([]*WorkRequest, 4)
	var early int
	testHookFinishing = func() { early += cq.Poll(out) }
	defer func() { testHookFinishing = nil }()
	w := new(WorkRequest)
	e.qp.PostGet(context.Background(), w, local, remote)
	complete(e.route.next(t), nil)
	if early != 0 {
		t.Fatal("the queue handed over a request while its outcome was being reported")
	}
	if n := cq.Poll(out); n != 1 || out[0] != w {
		t.Fatalf("Poll: %d", n)
	}
	if done, err := w.Poll(); !done || err != nil {
		t.Fatalf("reaped request: %v %v", done, err)
	}
	if !drained(t, e.local, local) {
		t.Fatal("local memory still referenced by a reaped request")
	}
	e.qp.Release()
}

// An operation posted under a context that already ended, and one
// cancelled by its batch's context, are reported through the queue with
// the context's error.
func TestCQCancelled(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	cq := NewCompletionQueue(4)
	e.qp.SetCompletionQueue(cq)
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	w := new(WorkRequest)
	e.qp.PostOps(ended, []*WorkRequest{w}, []Op{GetOp(local, remote)})
	ctx, cancel2 := context.WithCancel(context.Background())
	b := e.qp.Submit(ctx, GetOp(local, remote))
	e.route.next(t)
	cancel2()
	out := make([]*WorkRequest, 4)
	got := map[*WorkRequest]error{}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	for len(got) < 2 {
		n, err := cq.Wait(wctx, out)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range out[:n] {
			got[r] = r.Err()
		}
	}
	if !errors.Is(got[w], context.Canceled) || !errors.Is(got[b.Requests()[0]], context.Canceled) {
		t.Fatalf("outcomes %v", got)
	}
	if !drained(t, e.local, local) {
		t.Fatal("local memory referenced after the cancelled operations were reported")
	}
	e.qp.Release()
}

// Reaped means released, under a completer on another goroutine: the
// moment the queue hands a request over, its local region holds no
// reference (a release that may not wait succeeds) and it is done.
func TestCQReapedIsReleased(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	defer e.qp.Release()
	stop := completeAll(e.route)
	defer stop()
	cq := NewCompletionQueue(1)
	e.qp.SetCompletionQueue(cq)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	w := new(WorkRequest)
	out := make([]*WorkRequest, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 300 {
		local := alloc(t, e.local, 64, buffer.AccessReadWrite)
		e.qp.PostGet(context.Background(), w, local, remote)
		if _, err := cq.Wait(ctx, out); err != nil {
			t.Fatal(err)
		}
		if done, err := w.Poll(); !done || err != nil {
			t.Fatalf("use %d: reaped request: %v %v", i, done, err)
		}
		if !drained(t, e.local, local) {
			t.Fatalf("use %d: local region still referenced when the queue reported the request", i)
		}
	}
}
