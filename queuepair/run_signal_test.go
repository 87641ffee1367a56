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

// runHammerRoute completes each posted chain as one run
// (qpbind.RunCompleter), from one of its completer goroutines, after a
// random short spin: the run's completion (each request made done with
// one atomic operation, its signal after) races the owner's Wait, Poll,
// Done, Cancel and reap. Cancel only asks, so nothing completes twice.
type runHammerRoute struct {
	hammerRoute
	chains chan []*backend.WorkRequest
}

func (r *runHammerRoute) PostList(wrs []*backend.WorkRequest) (int, error) {
	chain := make([]*backend.WorkRequest, len(wrs)) // the slice is the poster's
	r.mu.Lock()
	for i, wr := range wrs {
		r.n++
		r.outc[wr] = &useErr{r.n}
		chain[i] = wr
	}
	r.mu.Unlock()
	r.chains <- chain
	return len(wrs), nil
}

func (r *runHammerRoute) completeRuns(rng *rand.Rand) {
	for chain := range r.chains {
		for range rng.IntN(64) {
			if rng.IntN(16) == 0 {
				runtime.Gosched()
			}
		}
		errs := make([]error, len(chain))
		for i, wr := range chain {
			errs[i] = r.outcome(wr)
			if c := wr.CancelCause(); c != nil && rng.IntN(2) == 0 {
				errs[i] = c
			}
		}
		chain[0].Done.(qpbind.RunCompleter).CompleteRun(chain, errs)
	}
}

// Owners post chains on queue pairs bound to their own completion queue,
// wait for each operation through Wait, Poll, Cancel or Done, reap every
// one from the queue and post the chain again, while runs complete them
// from other goroutines: each way of waiting sees exactly its own use's
// outcome (no lost wake-up, no token left from an earlier use), and the
// queue reports each use once.
func TestRunSignalHammer(t *testing.T) {
	owners, iters, chainLen := 6, 1500, 4
	if raceEnabled || testing.Short() {
		iters = 300
	}
	var hookRNG sync.Mutex
	hrng := rand.New(rand.NewPCG(3, 4))
	yield := func() { // a waiter or a run loses the CPU where the other can slip in
		hookRNG.Lock()
		y := hrng.IntN(2) == 0
		hookRNG.Unlock()
		if y {
			runtime.Gosched()
		}
	}
	testHookPark, testHookFinishing = yield, yield
	t.Cleanup(func() { testHookPark, testHookFinishing = nil, nil })
	e := newEnv(t, qpbind.Options{})
	rt := &runHammerRoute{hammerRoute: hammerRoute{outc: map[*backend.WorkRequest]error{}},
		chains: make(chan []*backend.WorkRequest, 64)}
	var cwg sync.WaitGroup
	for i := range 3 {
		cwg.Add(1)
		go func() { defer cwg.Done(); rt.completeRuns(rand.New(rand.NewPCG(uint64(i), 11))) }()
	}
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	errs := make(chan error, owners)
	var owg sync.WaitGroup
	var qps []*QueuePair
	for o := range owners {
		qp := newQueuePair(uint64(10+o), peerID, rt, e.local, qpbind.Options{})
		qps = append(qps, qp)
		local := alloc(t, e.local, 64, buffer.AccessReadWrite)
		owg.Add(1)
		go func() {
			defer owg.Done()
			errs <- runHammerOwner(qp, rt, local, remote, iters, chainLen, rand.New(rand.NewPCG(uint64(o), 5)))
		}()
	}
	awaitOwners(t, &owg, errs, "an owner never returned: a lost wake-up (a Wait, Cancel, Done or queue Wait that never ended)")
	close(rt.chains)
	cwg.Wait()
	for _, qp := range qps {
		qp.Release()
	}
}

// runHammerOwner posts iters chains of chainLen on its own work requests
// and checks each operation's outcome, then reaps them all.
func runHammerOwner(qp *QueuePair, rt *runHammerRoute, local, remote buffer.Buffer, iters, chainLen int, rng *rand.Rand) error {
	cq := NewCompletionQueue(chainLen)
	qp.SetCompletionQueue(cq)
	wrs := make([]*WorkRequest, chainLen)
	ops := make([]Op, chainLen)
	for i := range wrs {
		wrs[i] = new(WorkRequest)
		ops[i] = GetOp(local, remote)
	}
	if rng.IntN(2) == 0 {
		wrs[0].Done() // sticky: a token per completion for wrs[0]'s life
	}
	bg := context.Background()
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	out := make([]*WorkRequest, chainLen)
	for i := range iters {
		qp.PostOps(bg, wrs, ops)
		for j, x := range wrs {
			want := rt.outcome(&x.wr)
			mode := rng.IntN(4)
			if x.want.Load()&wantDone != 0 {
				mode = 4
			}
			var got error
			canc := false
			switch mode {
			case 0:
				got = x.Wait(bg)
			case 1:
				for {
					done, err := x.Poll()
					if done {
						got = err
						break
					}
					runtime.Gosched()
				}
			case 2:
				got, canc = x.Cancel(), true
			case 3:
				got, canc = x.Wait(cancelled), true
			case 4:
				<-x.Done()
				_, got = x.Poll()
			}
			if done, err := x.Poll(); !done || err != got {
				return fmt.Errorf("chain %d op %d mode %d: returned %v, then Poll says %v %v", i, j, mode, got, done, err)
			}
			if got != want && !(canc && errors.Is(got, context.Canceled)) {
				return fmt.Errorf("chain %d op %d mode %d: outcome %v, want %v: returned before its own completion", i, j, mode, got, want)
			}
		}
		seen := map[*WorkRequest]bool{}
		for len(seen) < chainLen {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			k, err := cq.Wait(ctx, out)
			cancel()
			if err != nil {
				return fmt.Errorf("chain %d: reaped %d of %d: %w", i, len(seen), chainLen, err)
			}
			for _, w := range out[:k] {
				if seen[w] {
					return fmt.Errorf("chain %d: an operation reported twice", i)
				}
				seen[w] = true
			}
		}
		if k := cq.Poll(out); k != 0 {
			return fmt.Errorf("chain %d: %d more reports", i, k)
		}
	}
	return nil
}
