package queuepair

import (
	"context"
	"sync"
	"sync/atomic"
)

// CompletionQueue collects the finished work requests of the queue pairs
// bound to it (SetCompletionQueue), as a verbs completion queue does: Poll
// reaps many in one call without blocking, Wait blocks for at least one.
// Several queue pairs may share one. The zero value is not usable: use
// NewCompletionQueue.
//
// Each operation posted on a bound queue pair holds one of the queue's
// slots from its post until a Poll or Wait hands it over, so the queue
// never overflows: an operation posted while every slot is held completes
// at once with rdmamgr.ErrLimit and is reported only through its own
// WorkRequest (Err, Poll, Wait, Done), never through the queue. Size the
// queue for the operations kept in flight (reaped ones free their slots).
type CompletionQueue struct {
	held atomic.Int64 // slots reserved by posted, not yet reaped, operations
	// fast counts the held slots of operations on routes that are not
	// slow (backend.SlowCompleter): Wait spins only while there are some.
	fast atomic.Int64

	mu       sync.Mutex
	ring     []*WorkRequest // finished, in completion order; len is the capacity
	head, n  int
	queued   atomic.Int64  // n, for a spinning Wait to look at without mu
	sleepers int           // Waits asleep on wake
	wake     chan struct{} // capacity 1: sent only when somebody sleeps
}

// NewCompletionQueue returns a queue of capacity slots (at least 1). It
// does no I/O and starts nothing.
func NewCompletionQueue(capacity int) *CompletionQueue {
	capacity = max(capacity, 1)
	return &CompletionQueue{ring: make([]*WorkRequest, capacity), wake: make(chan struct{}, 1)}
}

// Cap returns the queue's capacity.
func (cq *CompletionQueue) Cap() int { return len(cq.ring) }

// SetCompletionQueue makes the operations posted on q from now on report
// into cq as well as through their WorkRequest (nil: no queue). Operations
// posted before keep the queue they were posted with.
func (q *QueuePair) SetCompletionQueue(cq *CompletionQueue) { q.cq.Store(cq) }

// reserve takes a slot for an operation being posted; false when none is
// free.
func (cq *CompletionQueue) reserve() bool {
	if cq.held.Add(1) > int64(len(cq.ring)) {
		cq.held.Add(-1)
		return false
	}
	return true
}

// reserveN takes up to n slots at once for a chain being posted and
// returns how many it took.
func (cq *CompletionQueue) reserveN(n int64) int64 {
	if n <= 0 {
		return 0
	}
	over := cq.held.Add(n) - int64(len(cq.ring))
	if over <= 0 {
		return n
	}
	over = min(over, n)
	cq.held.Add(-over)
	return n - over
}

// unreserve gives back n slots reserveN took and no operation used.
func (cq *CompletionQueue) unreserve(n int64) {
	if n > 0 {
		cq.held.Add(-n)
	}
}

// push appends a finished w (which holds a slot, so there is room) and
// wakes a sleeping Wait.
func (cq *CompletionQueue) push(w *WorkRequest) {
	cq.pushAll([]*WorkRequest{w})
}

// pushAll is push of each of ws, in order, under one lock.
func (cq *CompletionQueue) pushAll(ws []*WorkRequest) {
	cq.mu.Lock()
	ring, i := cq.ring, cq.head+cq.n // in locals: a store into ring might alias cq's fields
	if i >= len(ring) {
		i -= len(ring)
	}
	// At most two pieces (the ring wraps once): copies, not a store per
	// request with its write barrier's check.
	n := copy(ring[i:], ws)
	copy(ring, ws[n:])
	cq.n += len(ws)
	cq.queued.Store(int64(cq.n))
	if cq.sleepers > 0 {
		select {
		case cq.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	cq.mu.Unlock()
}

// Poll moves up to len(out) finished work requests into out, oldest
// first, without blocking, and returns how many. Each is reported: its
// outcome is final (Err), no byte of it touches memory again, and it may
// be re-posted at once.
func (cq *CompletionQueue) Poll(out []*WorkRequest) int {
	cq.mu.Lock()
	k := cq.take(out)
	cq.mu.Unlock()
	return k
}

// take is Poll under cq.mu.
func (cq *CompletionQueue) take(out []*WorkRequest) int {
	k := min(len(out), cq.n)
	var fast int64                 // the fast slots handed over: one atomic operation for them all
	ring, head := cq.ring, cq.head // locals: a store into ring might alias cq's fields
	// At most two pieces (the ring wraps once), each copied out and
	// cleared (hold no request once it is handed over) in bulk.
	out = out[:k]
	n := copy(out, ring[head:min(head+k, len(ring))])
	clear(ring[head : head+n])
	copy(out[n:], ring[:k-n])
	clear(ring[:k-n])
	if head += k; head >= len(ring) {
		head -= len(ring)
	}
	for _, w := range out {
		if w.fast {
			w.fast = false
			fast++
		}
		w.queued = false // reported: the caller's to re-arm (WorkRequest.queued)
	}
	cq.head = head
	cq.n -= k
	cq.queued.Store(int64(cq.n))
	if fast > 0 {
		cq.fast.Add(-fast)
	}
	if k > 0 {
		cq.held.Add(int64(-k))
	}
	return k
}

// Wait is Poll that blocks until at least one work request finished (with
// out not empty) or ctx ends; then it returns 0 and ctx's error (see the
// package doc, "Errors"). It does not cancel anything. While operations
// reporting into cq are in flight it spins a little (spinFor, yielding
// its processor) before it parks: a completion that comes meanwhile costs
// no wake-up. Operations on slow routes (backend.SlowCompleter) are not
// spun for.
func (cq *CompletionQueue) Wait(ctx context.Context, out []*WorkRequest) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	var spin spinner
	for {
		for cq.queued.Load() == 0 && cq.fast.Load() > 0 && spin.more() {
		}
		spin.hit()
		cq.mu.Lock()
		if k := cq.take(out); k > 0 {
			if cq.n > 0 && cq.sleepers > 0 { // what is left is another sleeper's
				select {
				case cq.wake <- struct{}{}:
				default:
				}
			}
			cq.mu.Unlock()
			return k, nil
		}
		if err := ctx.Err(); err != nil {
			cq.mu.Unlock()
			return 0, ctxCause(ctx)
		}
		cq.sleepers++
		cq.mu.Unlock()
		select {
		case <-cq.wake:
		case <-ctx.Done():
		}
		cq.mu.Lock()
		cq.sleepers--
		cq.mu.Unlock()
	}
}
