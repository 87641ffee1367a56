package queuepair

import (
	"sync"
	"sync/atomic"

	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// The signal fence: selective signaling (Op.Unsignaled), as verbs has it.
// A successful unsignaled operation is not reported through its queue, so
// a program learns it is done from a signaled operation posted after it
// on the same queue pair: the queue hands that one over only once every
// unsignaled operation posted before it is done (a failed one is reported
// through the queue, ahead of it).
//
// Posts on a queue pair fall into epochs: each signaled operation posted
// while unsignaled ones are out closes the epoch it was posted in and
// opens the next. open counts each epoch's unsignaled operations not yet
// done, from the oldest still open (base) to the current one (the last).
// A signaled operation of epoch e that finishes while an epoch up to e is
// still open waits in held; it is pushed once every epoch up to e is
// closed and done. A queue pair that never posts an unsignaled operation
// has no fence (QueuePair.fence stays nil) and pays one pointer load per
// operation posted through a completion queue.
type signalFence struct {
	// out counts the unsignaled operations posted and not yet done: a
	// signaled one posted while it is 0 has nothing before it to wait for
	// (read without mu; posts racing each other have no order to keep).
	out atomic.Int64

	mu   sync.Mutex
	base uint64         // guarded by mu: the epoch of open[0]
	open []int64        // guarded by mu: per epoch from base, its unsignaled operations not done
	held []*WorkRequest // guarded by mu: finished signaled operations waiting, by epoch
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
// Op.Unsignaled, with q's fence: an unsignaled one counts in the current
// epoch; a signaled one posted while unsignaled ones are out closes it
// (w.fenced: its push waits for the epoch). Called before w can finish.
func (q *QueuePair) enlist(w *WorkRequest, unsig bool) {
	if unsig {
		q.fenceOf().add(w)
		return
	}
	w.unsig, w.fenced, w.fence = false, false, nil
	if f := q.fence.Load(); f != nil && f.out.Load() > 0 {
		f.close(w)
	}
}

// add counts an unsignaled w in the current epoch.
func (f *signalFence) add(w *WorkRequest) {
	f.mu.Lock()
	f.open[len(f.open)-1]++
	w.epoch = f.base + uint64(len(f.open)-1)
	f.out.Add(1)
	f.mu.Unlock()
	w.unsig, w.fenced, w.fence = true, false, f
}

// close makes signaled w the last of the current epoch and opens the
// next (w.fenced), unless no unsignaled operation is out any more.
func (f *signalFence) close(w *WorkRequest) {
	f.mu.Lock()
	if f.out.Load() > 0 {
		w.epoch = f.base + uint64(len(f.open)-1)
		f.open = append(f.open, 0)
		w.fenced, w.fence = true, f
	}
	f.mu.Unlock()
}

// done is an unsignaled operation of epoch e done (and, if it failed,
// pushed): it leaves its epoch's count and pushes the signaled operations
// that were waiting only for it.
func (f *signalFence) done(e uint64) {
	f.mu.Lock()
	f.open[e-f.base]--
	f.out.Add(-1)
	f.release()
	f.mu.Unlock()
}

// finished is a fenced signaled w of epoch e finished: pushed into cq now
// when every epoch up to e is closed and done, else held until it is.
// w is done already; like cq.push, this is the last touch of it.
func (f *signalFence) finished(w *WorkRequest, e uint64, cq *CompletionQueue) {
	f.mu.Lock()
	if e < f.base {
		cq.push(w)
	} else {
		w.cq = cq // kept for the push: w is queued, nobody re-arms it
		f.held = append(f.held, w)
	}
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
		w.state.Store(stateDone)
		cq.unslot(1, fast)
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
// that go there, done already, while unsignaled operations posted before
// the run may still be out: a failed unsignaled one at once, a signaled
// one held behind them (its own epoch closed, as enlist's close). The
// run's successful unsignaled operations were done inside its post, so
// they count in no epoch.
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
