package tcp

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// The fence: ordering as an RDMA RC queue pair has it, route-wide (a
// route carries every queue pair to its peer, so this is stronger than
// per queue pair). A notice (write-imm or send: the operations the owner
// is told of) reaches the owner only after every WRITE and atomic posted
// before it on the route has been answered, i.e. has landed. WRITEs and
// atomics are striped over the route's connections and notices go on the
// lane, so a notice posted while earlier ones are in flight is held here
// until they complete, and then queued on the lane by the releaser.
//
// Bookkeeping: the WRITEs and atomics are counted in epochs. A notice
// posted while the current epoch has some in flight is held in that
// epoch and opens a new one; it is released when its epoch and every
// earlier one have drained. Notices keep their posting order among
// themselves (held, released and direct ones alike): a notice goes
// straight to the lane only when nothing is in flight ahead of it and
// none is held or being released.
//
// Rules:
//   - Post never waits here: a held notice took its in-flight slots at
//     Post (reserve), as any operation does.
//   - A completion (a reader goroutine) never blocks here: it moves the
//     notices it releases to ready and wakes the releaser, a goroutine
//     started at the first release and waited for by drain; the releaser
//     queues them on the lane (which may wait for room in its queue).
//   - A held notice cancelled or past its deadline is completed at once,
//     exactly once, its memory untouched (fenceCancel, fenceExpire); one
//     held when the route fails is failed with the route's error
//     (fenceClose).
//   - A WRITE or atomic that fails (refused, cancelled, past its
//     deadline, route failure) releases the notices behind it once its
//     outcome is settled (just before it is reported; a reader's batch
//     releases them before reporting its ops): they are still sent (one operation's failure does not
//     fail its neighbours); the failed operation's bytes are undefined
//     anyway.
//   - Atomics are counted (a notice comes after their effect) but not
//     held: an atomic is not ordered after earlier WRITEs here. Gets are
//     neither.
//
// Hooks (marked "fence.go" where they are): route.fence; op.fenceEpoch;
// Post (fenceHold, fenceCount); PostList (fenceCountChain, one lock per
// chain); chunk.end (fenceDone) and doneBatch.finish (fenceDoneAll, one
// lock per batch of answers); Cancel
// (fenceCancel); the watchdog (fenceExpire); drain (fenceClose).

// fence is a route's ordering state; its zero value is ready.
type fence struct {
	mu sync.Mutex
	// epochs[len-1] is the current epoch, which new WRITEs and atomics
	// count in; its held list is always empty. epochs[0] has id base.
	epochs []fenceEpoch
	base   uint64
	ready  []*op // released, for the releaser to queue, in order
	busy   bool  // the releaser is queueing a batch taken from ready
	nheld  int   // notices held in epochs or ready
	closed bool  // drain took every held notice; nothing is held again

	started bool
	kick    chan struct{} // cap 1: ready has work
	wg      sync.WaitGroup
}

// fenceEpoch is a set of WRITEs and atomics and the notices posted after
// them.
type fenceEpoch struct {
	inFlight int   // WRITEs and atomics of this epoch not completed
	held     []*op // notices behind this epoch, in posting order
}

// isNotice reports whether op is ordered after earlier WRITEs and atomics.
func isNotice(op backend.Op) bool { return op == backend.OpWriteImm || op == backend.OpSend }

// fenceHold holds o if it is a notice with work ahead of it, and reports
// whether it did (the caller then queues nothing). Every op passes here
// at Post, before any of its chunks is queued.
func (r *route) fenceHold(o *op) bool {
	o.fenceEpoch = 0
	if !isNotice(o.wr.Op) {
		return false
	}
	f := &r.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false // the route failed: queueing fails it
	}
	if o.wr.CancelCause() != nil {
		// Cancelled while it was being posted, and its canceller's
		// fenceCancel (under mu) came before this: queueing ends it at
		// once (enqueue), instead of holding it behind the epochs.
		return false
	}
	n := len(f.epochs)
	switch {
	case n > 0 && f.epochs[n-1].inFlight > 0: // writes ahead: wait for them
		f.epochs[n-1].held = append(f.epochs[n-1].held, o)
		f.epochs = append(f.epochs, fenceEpoch{})
	case n > 1: // none in the current epoch, but notices held before it
		f.epochs[n-2].held = append(f.epochs[n-2].held, o)
	case len(f.ready) > 0 || f.busy: // behind notices being released
		f.ready = append(f.ready, o)
		f.wakeLocked(r)
	default:
		return false // nothing ahead: straight to the lane
	}
	f.nheld++
	return true
}

// fenced reports whether o is counted by the fence: a WRITE or an atomic.
func fenced(o *op) bool { return o.wr.Op == backend.OpWrite || o.wr.Op.Atomic() }

// fenceCount counts o, if it is a WRITE or an atomic, in the current
// epoch; called at Post before its chunks are queued.
func (r *route) fenceCount(o *op) {
	if !fenced(o) {
		return
	}
	o.fenceEpoch = r.fenceCountN(1)
}

// fenceCountChain counts the k WRITEs and atomics of the one-chunk ops
// chained from head in the current epoch, under one lock; called by
// PostList before the chain is queued.
func (r *route) fenceCountChain(head *chunk, k int) {
	e := r.fenceCountN(k)
	for c := head; c != nil; c = c.next {
		if fenced(c.op) {
			c.op.fenceEpoch = e
		}
	}
}

// fenceCountN counts k WRITEs and atomics in the current epoch and
// returns the fenceEpoch they carry (1 + the epoch's id).
func (r *route) fenceCountN(k int) uint64 {
	f := &r.fence
	f.mu.Lock()
	if len(f.epochs) == 0 {
		f.epochs = append(f.epochs, fenceEpoch{})
	}
	n := len(f.epochs)
	f.epochs[n-1].inFlight += k
	e := f.base + uint64(n)
	f.mu.Unlock()
	return e
}

// fenceDone uncounts a completed WRITE or atomic and releases the notices
// whose epochs have all drained. It never blocks.
func (r *route) fenceDone(o *op) {
	os := [1]*op{o}
	r.fenceDoneAll(os[:])
}

// fenceDoneAll is fenceDone of every op of os that the fence counted
// (fenceEpoch set), under one lock: a reader's batch of completions.
func (r *route) fenceDoneAll(os []*op) {
	f := &r.fence
	f.mu.Lock()
	for _, o := range os {
		if o.fenceEpoch != 0 {
			f.epochs[o.fenceEpoch-1-f.base].inFlight--
			o.fenceEpoch = 0
		}
	}
	released := false
	for len(f.epochs) > 1 && f.epochs[0].inFlight == 0 {
		if len(f.epochs[0].held) > 0 {
			f.ready = append(f.ready, f.epochs[0].held...)
			released = true
		}
		copy(f.epochs, f.epochs[1:])
		f.epochs[len(f.epochs)-1] = fenceEpoch{}
		f.epochs = f.epochs[:len(f.epochs)-1]
		f.base++
	}
	if released {
		f.wakeLocked(r)
	}
	f.mu.Unlock()
}

// wakeLocked wakes the releaser, starting it the first time.
func (f *fence) wakeLocked(r *route) {
	if f.closed {
		return
	}
	if !f.started {
		f.started = true
		f.kick = make(chan struct{}, 1)
		f.wg.Add(1)
		go r.fenceRelease()
	}
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// fenceRelease is the releaser: it queues released notices on the lane,
// in order, until the route fails.
func (r *route) fenceRelease() {
	f := &r.fence
	defer f.wg.Done()
	var batch []*op
	for {
		f.mu.Lock()
		for len(f.ready) == 0 {
			f.busy = false
			f.mu.Unlock()
			select {
			case <-f.kick:
			case <-r.Done():
				return
			}
			f.mu.Lock()
		}
		batch = append(batch[:0], f.ready...)
		clear(f.ready)
		f.ready = f.ready[:0]
		f.nheld -= len(batch)
		f.busy = true
		f.mu.Unlock()
		for i, o := range batch {
			batch[i] = nil
			wr := o.wr // o may be recycled once its last chunk is queued
			// A cancel that came meanwhile is carried out by enqueue;
			// nothing acts on wr after it (it may have completed and
			// been posted again).
			r.conns[0].enqueue(link(o.chunks, 0, 1), false) // its waiter may be waiting already: no lend
			if testHookQueued != nil {
				testHookQueued(wr)
			}
		}
	}
}

// takeLocked removes the held notices for which pick is true, in order.
func (f *fence) takeLocked(pick func(*op) bool) []*op {
	if f.nheld == 0 {
		return nil
	}
	var out []*op
	del := func(o *op) bool {
		if pick(o) {
			out = append(out, o)
			return true
		}
		return false
	}
	for i := range f.epochs {
		f.epochs[i].held = slices.DeleteFunc(f.epochs[i].held, del)
	}
	f.ready = slices.DeleteFunc(f.ready, del)
	f.nheld -= len(out)
	return out
}

// failHeld completes each op of os (taken from the fence: none of its
// chunks was queued) with err.
func failHeld(os []*op, err func(*op) error) {
	for _, o := range os {
		e := err(o)
		for i := range o.chunks {
			o.chunks[i].finish(e)
		}
	}
}

// fenceCancel completes wr with err if it is held here, and reports
// whether it was.
func (r *route) fenceCancel(wr *backend.WorkRequest, err error) bool {
	f := &r.fence
	f.mu.Lock()
	os := f.takeLocked(func(o *op) bool { return o.wr == wr })
	f.mu.Unlock()
	failHeld(os, func(*op) error { return err })
	return len(os) > 0
}

// fenceExpire fails the held notices past their deadline with
// ErrDeadline; the watchdog calls it as it expires chunks.
func (r *route) fenceExpire(now time.Time) {
	f := &r.fence
	f.mu.Lock()
	os := f.takeLocked(func(o *op) bool { return !o.wr.Deadline.IsZero() && now.After(o.wr.Deadline) })
	f.mu.Unlock()
	failHeld(os, func(o *op) error {
		return fmt.Errorf("tcp: %s of %d bytes held behind earlier writes: %w", o.wr.Op, len(o.wr.Local), rdmamgr.ErrDeadline)
	})
}

// fenceClose fails every held notice with err and waits for the
// releaser; drain calls it once the connections' loops have exited, before
// failing their chunks.
func (r *route) fenceClose(err error) {
	if err == nil {
		err = rdmamgr.ErrClosed
	}
	f := &r.fence
	f.mu.Lock()
	f.closed = true
	os := f.takeLocked(func(*op) bool { return true })
	f.mu.Unlock()
	f.wg.Wait()
	failHeld(os, func(*op) error { return err })
}
