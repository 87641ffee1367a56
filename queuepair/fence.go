package queuepair

import (
	"sync"
	"sync/atomic"

	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// The signal fence: selective signaling (Op.Unsignaled), as verbs has it.
// A successful unsignaled operation is not reported through its queue, so
// a program learns it is done from a signaled operation posted after it
// on the same queue pair, as a verbs program does from RC's in-order
// completions: once a queue pair has posted an unsignaled operation, the
// queue hands over each signaled one only once every operation posted
// before it on the queue pair (signaled or not) is done; operations
// posted before the fence was made, and Submit's, are not counted. A
// failed unsignaled operation is reported through the queue when it
// fails.
//
// Posts on a fenced queue pair fall into epochs: each signaled operation
// is the last of its epoch and opens the next. open counts each epoch's
// operations not yet done, from the oldest still open (base) to the
// current one (the last). A signaled operation of epoch e, once done,
// waits in held until every epoch up to e is done; then it is pushed,
// with the others so released, in epoch order. Operations an inline run
// completes inside its post (runInline) count in no epoch: they are done
// before anything after them is posted. A queue pair that never posts an
// unsignaled operation has no fence (QueuePair.fence stays nil) and pays
// one pointer load per operation posted through a completion queue; one
// that did takes the fence's lock as each operation not run inline is
// posted and as it finishes.
type signalFence struct {
	// out counts the operations counted in open (posted, not yet done):
	// an inline run's signaled operations are pushed at once while it is
	// 0 (read without mu; posts racing each other have no order to keep).
	out atomic.Int64

	mu   sync.Mutex
	base uint64         // guarded by mu: the epoch of open[0]
	open []int64        // guarded by mu: per epoch from base, its operations not done
	held []*WorkRequest // guarded by mu: done signaled operations waiting for their epochs
	push []*WorkRequest // guarded by mu: release's scratch
}

// fenceOf returns q's fence, made on the first unsignaled post.
func (q *QueuePair) fenceOf() *signalFence {
	if f := q.fence.Load(); f != nil {
		return f
	}
	f := &signalFence{open: make([]int64, 1, 8)}
	if !q.fence.CompareAndSwap(nil, f) {
		return q.fence.Load()
	}
	return f
}

// enlist records w, posted into cq (w.cq set) with unsig as its
// Op.Unsignaled, with q's fence, once q has one: w counts in the current
// epoch, and a signaled w closes it (w.fenced: its push waits for the
// epoch). Called before w can finish.
func (q *QueuePair) enlist(w *WorkRequest, unsig bool) {
	f := q.fence.Load()
	if f == nil {
		if !unsig {
			w.unsig, w.fenced, w.fence = false, false, nil
			return
		}
		f = q.fenceOf()
	}
	f.mu.Lock()
	f.open[len(f.open)-1]++
	w.epoch = f.base + uint64(len(f.open)-1)
	if !unsig {
		f.open = append(f.open, 0)
	}
	f.out.Add(1)
	f.mu.Unlock()
	w.unsig, w.fenced, w.fence = unsig, !unsig, f
}

// done is an unsignaled operation of epoch e done (and, if it failed,
// pushed): it leaves its epoch's count and pushes the signaled operations
// that were waiting only for it and the like.
func (f *signalFence) done(e uint64) {
	f.mu.Lock()
	f.open[e-f.base]--
	f.release()
	f.out.Add(-1) // after release's pushes: runInline reads out == 0 as "nothing held"
	f.mu.Unlock()
}

// finished is a fenced signaled w of epoch e done: it leaves its epoch's
// count and waits in held until every epoch up to e is done, which may be
// at once; whatever that releases is pushed, in epoch order. Like
// cq.push, this is the last touch of w.
func (f *signalFence) finished(w *WorkRequest, e uint64, cq *CompletionQueue) {
	f.mu.Lock()
	w.cq = cq // kept for the push: w is queued, nobody re-arms it
	f.held = append(f.held, w)
	f.open[e-f.base]--
	f.release()
	f.out.Add(-1) // after release's pushes: runInline reads out == 0 as "nothing held"
	f.mu.Unlock()
}

// release drops the closed epochs at the front that are done and pushes
// the held operations of those epochs into their queues, in epoch order.
// Under f.mu (which orders the pushes: a queue's lock comes after it).
func (f *signalFence) release() {
	k := 0
	for k < len(f.open)-1 && f.open[k] == 0 {
		k++
	}
	if k == 0 {
		return
	}
	f.base += uint64(k)
	n := copy(f.open, f.open[k:])
	clear(f.open[n:])
	f.open = f.open[:n]
	if len(f.held) == 0 {
		return
	}
	// Held operations of the dropped epochs go, oldest epoch first; the
	// rest stay, in order.
	keep := f.held[:0]
	push := f.push[:0]
	for _, w := range f.held {
		if w.epoch < f.base {
			push = append(push, w)
		} else {
			keep = append(keep, w)
		}
	}
	clear(f.held[len(keep):])
	f.held = keep
	sortByEpoch(push)
	for _, w := range push {
		cq := w.cq
		w.cq = nil
		cq.push(w) // the last touch of w
	}
	clear(push)
	f.push = push[:0]
}

// sortByEpoch sorts ws by epoch (few, nearly in order: insertion).
func sortByEpoch(ws []*WorkRequest) {
	for i := 1; i < len(ws); i++ {
		for j := i; j > 0 && ws[j].epoch < ws[j-1].epoch; j-- {
			ws[j], ws[j-1] = ws[j-1], ws[j]
		}
	}
}

// reportFenced is report's end for a w that enlist marked unsig or fenced
// (never a batch's): a successful unsignaled one is done and gives its
// slot back, pushed nowhere; a failed one is pushed as any operation, and
// only then leaves its epoch (so it is in the queue ahead of the signaled
// ones that wait for it); a fenced signaled one is pushed now or held.
// Everything w's finisher needs is read before w is done: from then on
// its owner may re-arm it (a pushed one: once its queue hands it over).
func (w *WorkRequest) reportFenced(err error, ref memreg.Ref, cq *CompletionQueue) {
	f, e, unsig := w.fence, w.epoch, w.unsig
	ref.Release() // reported means finished: let go first
	if unsig && err == nil {
		fast := w.fast
		w.fast = false
		cq.unslot(1, fast) // before done: its owner may re-post it at once
		w.state.Store(stateDone)
		f.done(e)
		return
	}
	w.queued = true
	w.state.Store(stateDone)
	if unsig {
		cq.push(w)
		f.done(e)
		return
	}
	f.finished(w, e, cq)
}

// pushRun pushes into cq the operations of an inline run (runInline)
// that go there, done already, while operations posted before the run
// may still be out: a failed unsignaled one at once, a signaled one held
// behind them (the last of the current epoch, as enlist makes it, but
// counted in none: it is done). The run's successful unsignaled
// operations were done inside its post, so they count in no epoch.
func (f *signalFence) pushRun(ws []*WorkRequest, cq *CompletionQueue) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.out.Load() == 0 { // none out any more
		cq.pushAll(ws)
		return
	}
	for _, w := range ws {
		if w.unsig {
			cq.push(w) // the last touch of w
			continue
		}
		w.epoch = f.base + uint64(len(f.open)-1)
		f.open = append(f.open, 0)
		w.cq = cq
		f.held = append(f.held, w)
	}
}

// unslot gives back n slots of operations that are reported through
// their work requests only (successful unsignaled ones); fast: they
// counted in cq.fast.
func (cq *CompletionQueue) unslot(n int64, fast bool) {
	if fast {
		cq.fast.Add(-n)
	}
	cq.held.Add(-n)
}
