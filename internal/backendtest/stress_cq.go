package backendtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr/queuepair"
)

// The completion-queue mode of CancelStress (StressEnv.CQ): every queue
// pair reports into one queue, a reaper goroutine (CancelStress owns and
// waits for it) reaps it, and each victim takes its outcome from the
// queue's report rather than from its own Wait: the memory is taken back
// the moment the queue hands the operation over.

// reaper hands what a completion queue reports to whoever awaits it.
type reaper struct {
	mu      sync.Mutex
	waiting map[*queuepair.WorkRequest]chan struct{}
	arrived map[*queuepair.WorkRequest]int // reported, nobody awaiting yet
	twice   string                         // a work request reported twice, if one was
	stop    context.CancelFunc
	done    chan struct{}
}

func startReaper(cq *queuepair.CompletionQueue) *reaper {
	ctx, stop := context.WithCancel(context.Background())
	r := &reaper{waiting: map[*queuepair.WorkRequest]chan struct{}{}, arrived: map[*queuepair.WorkRequest]int{},
		stop: stop, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		out := make([]*queuepair.WorkRequest, 32)
		for {
			n, err := cq.Wait(ctx, out)
			if err != nil {
				return
			}
			r.mu.Lock()
			for _, w := range out[:n] {
				if ch := r.waiting[w]; ch != nil {
					delete(r.waiting, w)
					close(ch)
					continue
				}
				if r.arrived[w]++; r.arrived[w] > 1 && r.twice == "" {
					r.twice = fmt.Sprintf("work request %p reported twice without a re-post", w)
				}
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// close stops the reaper and waits for it.
func (r *reaper) close() {
	r.stop()
	<-r.done
}

// await returns a channel closed once w has been reported (at once if it
// was); a victim awaits each post once.
func (r *reaper) await(w *queuepair.WorkRequest) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	if r.arrived[w] > 0 {
		r.arrived[w]--
		if r.arrived[w] == 0 {
			delete(r.arrived, w)
		}
		close(ch)
		return ch
	}
	r.waiting[w] = ch
	return ch
}

// forget drops what is recorded of neighbours' requests (nobody awaits
// them); it returns the first double report seen.
func (r *reaper) forget() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.arrived)
	return r.twice
}

// reported waits until the queue reported w and returns a description of
// what went wrong ("" if nothing) and w's outcome.
func (r *reaper) reported(w *queuepair.WorkRequest, timeout time.Duration) (wrong string, outcome error) {
	select {
	case <-r.await(w):
		done, err := w.Poll()
		if !done {
			return "the completion queue reported a pending operation", nil
		}
		return "", err
	case <-time.After(timeout):
		return fmt.Sprintf("not reported through the completion queue within %v", timeout), nil
	}
}

// runCQ ends the victim as runWait does, and takes its outcome from the
// completion queue's report.
func (v *victim) runCQ(e StressEnv, rp *reaper, qp *queuepair.QueuePair, op queuepair.Op) error {
	var w *queuepair.WorkRequest
	var err error
	var wrong string
	switch v.kind {
	case kindPreCancelled:
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		w = qp.Submit(ctx, op).Requests()[0]
		wrong, err = rp.reported(w, e.Timeout)
	case kindTinyDeadline:
		ctx, cancel := context.WithTimeout(context.Background(), v.delay)
		w = qp.Submit(ctx, op).Requests()[0]
		wrong, err = rp.reported(w, e.Timeout) // ended by Submit's ctx
		cancel()
	case kindCancelLater:
		ctx, cancel := context.WithCancel(context.Background())
		w = qp.Submit(ctx, op).Requests()[0]
		time.AfterFunc(v.delay, cancel)
		wrong, err = rp.reported(w, e.Timeout)
		cancel()
	case kindWaitDeadline:
		// Per-operation Wait keeps working for an operation a queue
		// reports: its ctx cancels it; the queue then reports the same.
		w = new(queuepair.WorkRequest)
		qp.PostOps(context.Background(), []*queuepair.WorkRequest{w}, []queuepair.Op{op})
		ctx, cancel := context.WithTimeout(context.Background(), v.delay)
		werr := w.Wait(ctx)
		cancel()
		wrong, err = rp.reported(w, e.Timeout)
		if wrong == "" && err != werr {
			wrong = fmt.Sprintf("Wait returned %v, the completion queue reported %v", werr, err)
		}
	}
	if wrong != "" {
		v.wrong = wrong
	}
	return err
}
