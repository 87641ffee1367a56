package queuepair

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// useErr is the outcome hammerRoute gives one post: a Wait that returns
// anything else (nil, another use's outcome) ended early.
type useErr struct{ n uint64 }

func (e *useErr) Error() string { return fmt.Sprintf("use %d", e.n) }

// hammerRoute completes each posted request exactly once, from one of its
// completer goroutines, after a random short spin: the completion races
// the owner's Wait, Poll, Done and re-arm. Cancel only asks (the
// completer reports the cause then), so no request is completed twice.
type hammerRoute struct {
	fakeRoute
	q chan *backend.WorkRequest

	mu   sync.Mutex
	n    uint64
	outc map[*backend.WorkRequest]error // the outcome of each request's current use
}

func (r *hammerRoute) Post(wr *backend.WorkRequest) error {
	r.mu.Lock()
	r.n++
	r.outc[wr] = &useErr{r.n}
	r.mu.Unlock()
	r.q <- wr
	return nil
}

func (r *hammerRoute) Cancel(*backend.WorkRequest) {}

// outcome is what wr's current use completes with unless cancelled.
func (r *hammerRoute) outcome(wr *backend.WorkRequest) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outc[wr]
}

func (r *hammerRoute) complete(rng *rand.Rand) {
	for wr := range r.q {
		for range rng.IntN(64) {
			if rng.IntN(16) == 0 {
				runtime.Gosched()
			}
		}
		err := r.outcome(wr)
		if c := wr.CancelCause(); c != nil && rng.IntN(2) == 0 {
			err = c
		}
		wr.Done.Complete(wr, err)
	}
}

// Many owners re-arm their work requests as fast as they can while other
// goroutines complete them: Wait, Cancel and Done must each see exactly
// their own use's completion: never hang (a lost wake-up: the finish read
// "nobody waits" while a waiter was parking) and never return before it
// (an early one: a token left from an earlier use).
func TestSignalHammer(t *testing.T) {
	owners, iters := 8, 3000
	if raceEnabled || testing.Short() {
		iters = 600
	}
	var hookRNG sync.Mutex
	hrng := rand.New(rand.NewPCG(1, 2))
	testHookPark = func() { // a waiter loses the CPU where a finish can slip in
		hookRNG.Lock()
		yield := hrng.IntN(2) == 0
		hookRNG.Unlock()
		if yield {
			runtime.Gosched()
		}
	}
	t.Cleanup(func() { testHookPark = nil })
	e := newEnv(t, qpbind.Options{})
	rt := &hammerRoute{q: make(chan *backend.WorkRequest, 64), outc: map[*backend.WorkRequest]error{}}
	qp := newQueuePair(1, peerID, rt, e.local, qpbind.Options{})
	var cwg sync.WaitGroup
	for i := range 3 {
		cwg.Add(1)
		go func() { defer cwg.Done(); rt.complete(rand.New(rand.NewPCG(uint64(i), 7))) }()
	}
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	errs := make(chan error, owners)
	var owg sync.WaitGroup
	for o := range owners {
		local := alloc(t, e.local, 64, buffer.AccessReadWrite)
		owg.Add(1)
		go func() {
			defer owg.Done()
			errs <- hammerOwner(qp, rt, local, remote, iters, rand.New(rand.NewPCG(uint64(o), 99)))
		}()
	}
	awaitOwners(t, &owg, errs, "an owner never returned: a lost wake-up (a Wait, Cancel or Done that never ended)")
	close(rt.q)
	cwg.Wait()
	qp.Release()
}

// hammerOwner posts iters operations on its two work requests (one never
// asked for Done, one whose Done it uses), reporting through a mix of
// Wait, Cancel, Done and Poll, and checks each outcome is its own.
func hammerOwner(qp *QueuePair, rt *hammerRoute, local, remote buffer.Buffer, iters int, rng *rand.Rand) error {
	var w, wd WorkRequest
	bg := context.Background()
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	for i := range iters {
		mode := rng.IntN(5)
		x := &w
		if mode == 4 {
			x = &wd
		}
		qp.PostGet(bg, x, local, remote)
		want := rt.outcome(&x.wr)
		if rng.IntN(2) == 0 {
			runtime.Gosched() // sometimes the completion comes first
		}
		var got error
		canc := false
		switch mode {
		case 0: // Wait, parking or not
			got = x.Wait(bg)
		case 1: // Poll until done, then re-arm: no token is taken
			for {
				done, err := x.Poll()
				if done {
					got = err
					break
				}
				runtime.Gosched()
			}
		case 2: // Cancel
			got, canc = x.Cancel(), true
		case 3: // Wait whose ctx has ended: it cancels, then waits
			got, canc = x.Wait(cancelled), true
		case 4: // Done (sticky for wd's life)
			<-x.Done()
			_, got = x.Poll()
		}
		if done, err := x.Poll(); !done || err != got {
			return fmt.Errorf("use %d mode %d: returned %v, then Poll says %v %v", i, mode, got, done, err)
		}
		if got != want && !(canc && errors.Is(got, context.Canceled)) {
			return fmt.Errorf("use %d mode %d: outcome %v, want %v: returned before its own completion", i, mode, got, want)
		}
	}
	return nil
}

// A completion nobody waits for sends no token (Poll reads the state);
// Done called for the first time after the completion still gets one, a
// later call no second, and from then on every completion sends one.
func TestSignalOnlyWhenWanted(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	var w WorkRequest
	if err := w.Wait(context.Background()); err != nil { // never posted: nothing to wait for
		t.Fatalf("Wait of a never-posted request: %v", err)
	}
	ctx := context.Background()
	e.qp.PostPut(ctx, &w, local, remote)
	complete(e.route.next(t), nil)
	if done, err := w.Poll(); !done || err != nil {
		t.Fatalf("poll: %v %v", done, err)
	}
	if n := len(w.sig); n != 0 {
		t.Fatalf("%d token(s) sent with nobody waiting", n)
	}
	select {
	case <-w.Done(): // first call after the completion: Done sends it
	case <-time.After(10 * time.Second):
		t.Fatal("Done called after the completion never received")
	}
	select {
	case <-w.Done():
		t.Fatal("a second token for one completion")
	default:
	}
	for i := range 3 {
		e.qp.PostGet(ctx, &w, local, remote)
		select {
		case <-w.Done():
			t.Fatalf("use %d: token before the completion", i)
		default:
		}
		complete(e.route.next(t), nil)
		select {
		case <-w.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("use %d: Done never received", i)
		}
	}
}

// awaitOwners waits for the hammer's owners (30 s at most: a pass takes
// well under a second; past it, fails with lost), then reports each
// owner's error.
func awaitOwners(t *testing.T, owg *sync.WaitGroup, errs chan error, lost string) {
	t.Helper()
	all := make(chan struct{})
	go func() { owg.Wait(); close(all) }()
	limit := time.NewTimer(30 * time.Second)
	defer limit.Stop()
	select {
	case <-all:
	case <-limit.C:
		t.Fatal(lost)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}
