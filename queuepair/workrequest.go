package queuepair

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// WorkRequest is the handle of one posted operation. Put and Get return a
// new one; PostPut and PostGet reuse one the caller owns.
type WorkRequest struct {
	// The fields every post and completion of a small operation touches
	// come first, together, and wr's own first fields right after them
	// (backend.WorkRequest): two cache lines of w, not five.
	state reqState
	// want says who can receive a token on sig: wantWaiter while a Wait or
	// Cancel may park on it (cleared by the next re-arm), wantDone once
	// Done was called (for w's life). finish sends a token only when want
	// is set, so an operation nobody parks on costs no channel operation.
	want atomic.Uint32
	// staged: w's local is device memory the queue pair stages
	// (stage.go); dev: the device local handed to a route that takes it.
	staged atomic.Bool
	// queued: w is done and in its completion queue, not yet handed over.
	// A plain field, not a state: the finisher sets it before w's state
	// becomes done (so whoever sees done sees it), the queue's take clears
	// it under the queue's lock before it hands w over (so its reaper sees
	// it clear); an atomic store per operation less.
	queued bool
	// fast: w holds a slot of a completion queue and its route is not
	// slow (the queue's fast count has it until a Poll hands w over).
	fast bool
	// unsig: w was posted into a queue as Op.Unsignaled (counted in
	// fence's epoch); fenced: w is signaled, counted too, and its push
	// waits for the operations of the epochs up to its own (fence.go).
	// Both set by QueuePair.enlist as w takes its queue slot (runInline
	// sets unsig for its own), read by its finisher.
	unsig, fenced bool
	// owner is the queue pair w was last posted on: where a cancel goes.
	// Atomic: a batch's context watcher reads it while the backend runs.
	owner atomic.Pointer[QueuePair]
	batch *Batch        // set once by Submit: its watcher stops with the last op
	sig   chan struct{} // capacity 1: at most one token, sent only when wanted
	qp    *QueuePair    // set while the operation counts in qp.ops
	// cq is the completion queue w reports into (a slot reserved for it);
	// from its finish until that queue's Poll hands it over, w is queued:
	// re-arming w before is a caller bug (reset panics).
	cq  *CompletionQueue
	id  uint64 // Op.ID of the operation last posted on w
	err error  // written before state becomes done

	wr    backend.WorkRequest
	ref   memreg.Ref // the local memory, held until the outcome is reported
	start time.Time  // when it was posted, for the queue pair's Observer
	// dlMono, dlFor: wr.Deadline is armOne's, built at the coarse clock's
	// reading dlMono for a timeout of dlFor (dlMono 0: it is not; every
	// other writer of wr.Deadline clears it). armOne reuses it while the
	// reading and the timeout are the same.
	dlMono int64
	dlFor  time.Duration
	dev    memreg.DeviceSpan
	fence  *signalFence // where unsig or fenced w reports (enlist)
	epoch  uint64       // its epoch in fence
}

// ID returns the Op.ID w was last posted with (PostOps, Submit); 0 for
// the operations of Put, Get and the other single verbs.
func (w *WorkRequest) ID() uint64 { return w.id }

// size is how many bytes w moves (8 for an atomic).
func (w *WorkRequest) size() int {
	if w.wr.Op.Atomic() {
		return 8
	}
	if w.wr.Local == nil { // a device local
		return int(w.wr.Remote.Length)
	}
	return len(w.wr.Local)
}

const (
	stateIdle uint32 = iota
	statePending
	stateDone
	// stateReporting: finish is reporting the outcome (done in a moment).
	// Poll, Wait and re-arming wait it out, so nothing sees the operation
	// done before its signal was sent: a signal sent after a re-arm would
	// end the next Wait early.
	stateReporting
	// An operation done and in its completion queue, not yet handed over
	// by a Poll or Wait of it, is stateDone with WorkRequest.queued set:
	// re-arming it is a caller bug (reset panics).
)

// reqState is a WorkRequest's state: atomic, as atomic.Uint32, except
// for armFast's and armOne's plain store (setOwned).
type reqState struct{ v uint32 }

func (s *reqState) Load() uint32   { return atomic.LoadUint32(&s.v) }
func (s *reqState) Store(v uint32) { atomic.StoreUint32(&s.v, v) }
func (s *reqState) CompareAndSwap(old, v uint32) bool {
	return atomic.CompareAndSwapUint32(&s.v, old, v)
}

// setOwned stores v without an atomic operation (a locked instruction,
// which waits for every store before it to drain: a fifth of the cost of
// an 8-byte operation). Only for a re-arm from idle or done (armFast,
// armOne, runInline), which is the owner's alone: no other goroutine may read the state then (the
// completer's last touch of the request came before its done, which the
// owner saw; a Wait, Poll or Cancel of the previous use racing the
// re-post is a caller bug, as it is for the rest of the request, written
// plainly by reset), and whoever reads it next learns of the post
// through the route (a lock, a channel) or is the owner itself.
func (s *reqState) setOwned(v uint32) { s.v = v }

// finished reports whether state s is an outcome's (queued or not).
func finished(s uint32) bool { return s == stateDone }

// Bits of WorkRequest.want.
const (
	wantWaiter uint32 = 1 << iota // a Wait or Cancel may park on sig
	wantDone                      // Done was called: a token per completion
)

// The signal handshake. finish moves state from pending to reporting and
// then reads want; a waiter sets want and then reads state. The atomics
// are sequentially consistent, so one of the two sees the other: either
// the waiter sees the operation no longer pending (and does not park), or
// finish sees want set and sends the token the waiter parks for. finish
// sends a token only while reporting, before the state becomes done, and
// reset (which first waits reporting out) drains it. CompleteRun,
// CompleteInline and runInline send theirs just after done, when nobody
// can re-arm the request yet (its queue still holds it; its poster is
// still in the Post). So a token never outlives the use it reports into the next one,
// unless a waiter races the re-post (a caller bug); even then it does not
// end a later Wait or Cancel early (tokenIsOutcome).

// settled returns w's state once no outcome is being reported. Small
// enough to inline: the data path (a re-arm, Poll, Err) pays no call.
func (w *WorkRequest) settled() uint32 {
	if s := w.state.Load(); s != stateReporting {
		return s
	}
	return w.settleSlow()
}

// settleSlow is settled's wait for a report in progress.
func (w *WorkRequest) settleSlow() uint32 {
	for {
		if s := w.state.Load(); s != stateReporting {
			return s
		}
		runtime.Gosched()
	}
}

// testHookFinishing, when set by a test, runs while an outcome is being
// reported: it widens the window a waiter must not slip through.
var testHookFinishing func()

// testHookPark, when set by a test, runs as a waiter parks, before it
// says it waits and before it checks the state again: it widens the
// windows the handshake must close.
var testHookPark func()

// completer is the backend's view of a WorkRequest: the backend completes
// the operation through it (backend.Completer), and a program, which sees
// only *WorkRequest, cannot.
type completer WorkRequest

// Complete implements backend.Completer.
func (c *completer) Complete(_ *backend.WorkRequest, err error) { (*WorkRequest)(c).finish(err) }

// reset makes w pending for a new operation; it panics if w is pending.
func (w *WorkRequest) reset(op backend.Op, remote *buffer.Buffer, deadline time.Time, ctx context.Context) {
	s := w.settled()
	if s == stateDone && w.queued { // read after the state: see WorkRequest.queued
		panic("queuepair: WorkRequest reused before its completion queue reported it")
	}
	if w.batch != nil && s != stateIdle {
		// Its batch's context watcher and Cancel still act on it: a
		// batch's requests serve that batch once (Submit makes new ones).
		panic("queuepair: a Submit batch's WorkRequest re-posted")
	}
	if (s != stateIdle && s != stateDone) || !w.state.CompareAndSwap(s, statePending) {
		panic("queuepair: WorkRequest reused while pending")
	}
	if w.sig == nil {
		w.sig = make(chan struct{}, 1)
	}
	if want := w.want.Load(); want != 0 { // a token may have been sent
		select {
		case <-w.sig: // a token nobody consumed
		default:
		}
		if want&wantWaiter != 0 {
			w.want.And(^wantWaiter) // nobody waits on the new use yet
		}
	}
	// w.err is left: it is read only once w is done, and every way to
	// done writes it first.
	if w.staged.Load() {
		w.staged.Store(false)
	}
	if w.wr.CancelCause() != nil {
		w.wr.Reset() // the cause: only Reset clears it
	}
	// Every other field of backend.WorkRequest written once (Reset, then
	// these, wrote most twice); Imm, HasImm, Compare and Swap are
	// prepare's. TestResetWritesEveryField keeps this in step with the
	// struct.
	wr := &w.wr
	// Remote in a statement of its own: in a tuple assignment the compiler
	// copies *remote through a temporary first (it might alias wr), and
	// the second, overlapping copy of 104 bytes stalls on store forwarding.
	wr.Remote = *remote
	wr.Op, wr.Local, wr.LocalRegion = op, nil, nil
	wr.Deadline, wr.Done, wr.Cancel, wr.Result = deadline, (*completer)(w), nil, 0
	w.dlMono = 0
	wr.Via, wr.Origin, wr.Waited = 0, 0, false
	if ctx != nil {
		wr.Cancel = ctx.Done()
	}
}

// finish reports the outcome once: the first call after reset wins.
func (w *WorkRequest) finish(err error) {
	if w.state.CompareAndSwap(statePending, stateReporting) {
		w.report(err)
	}
}

// report is finish once w is stateReporting (finish's, or CompleteRun's).
func (w *WorkRequest) report(err error) {
	w.qp.observe(w, err) // first: it adds nothing between the release and done below
	w.start = time.Time{}
	ref := w.ref
	w.ref = memreg.Ref{}
	q := w.qp // read before done: the owner may re-arm w right after
	w.qp = nil
	b := w.batch
	cq := w.cq
	w.cq = nil
	w.err = err
	if w.want.Load() != 0 { // after the CAS above: see "The signal handshake"
		w.signal()
	}
	if testHookFinishing != nil {
		testHookFinishing()
	}
	if cq != nil && (w.unsig || w.fenced) {
		w.reportFenced(err, ref, cq) // fence.go
	} else if cq != nil {
		// Reported through cq: the memory is let go and w is done before
		// cq can hand it over (reported means finished). Until a Poll of
		// cq takes it, nobody may re-arm w (queued), so pushing it
		// after it is done cannot report a later use.
		ref.Release()
		w.queued = true
		w.state.Store(stateDone)
		if b != nil && b.left.Add(-1) == 0 {
			b.unwatch()
		}
		cq.push(w) // the last touch of w: the reaper may re-arm it at once
	} else {
		w.state.Store(stateDone) // last: w is the owner's again
		// The local region is let go only once the outcome is reported:
		// whoever waits for its references (Release) then finds the
		// operation done.
		ref.Release()
		if b != nil && b.left.Add(-1) == 0 {
			b.unwatch()
		}
	}
	if q != nil {
		q.ops.Leave()
	}
}

// cancel asks the backend to end w early with cause; it returns at once
// and w completes (promptly) once the backend can no longer touch its
// memory. A no-op once w completed.
func (w *WorkRequest) cancel(cause error) {
	if w.state.Load() != statePending || !w.wr.RequestCancel(cause) {
		return
	}
	// The cause is set first, so a Post still running sees it (backends
	// check it as they queue); a Cancel that arrives after completion is
	// ignored by the route.
	if q := w.owner.Load(); q != nil {
		if w.staged.Load() {
			q.stage.cancel(w) // its worker cancels the inner operations
		} else {
			q.route.Cancel(&w.wr)
		}
	}
}

// signal sends the token unless one is there already.
func (w *WorkRequest) signal() {
	select {
	case w.sig <- struct{}{}:
	default:
	}
}

// Done returns a channel that receives a value when the operation
// completes (one value per completion: use either Done or Wait, not both).
// From its first call on, every completion of w sends one.
func (w *WorkRequest) Done() <-chan struct{} {
	if w.sig == nil { // never posted: the first post's completion sends
		w.sig = make(chan struct{}, 1)
	}
	w.undrive()
	if w.want.Or(wantDone)&wantDone == 0 {
		// First call: an operation whose finish read want before this
		// would send nothing; send its token here.
		if finished(w.settled()) {
			w.signal()
		}
	}
	return w.sig
}

// park readies w's signal for a waiter: it reports false when the
// operation is no longer pending (no token will come for this waiter),
// true when the finish still to come sends one.
func (w *WorkRequest) park() bool {
	if testHookPark != nil {
		testHookPark()
	}
	w.want.Or(wantWaiter)
	if testHookPark != nil {
		testHookPark()
	}
	return w.state.Load() == statePending
}

// Poll reports whether the operation completed, and its error if so.
func (w *WorkRequest) Poll() (bool, error) {
	if finished(w.settled()) {
		return true, w.err
	}
	w.undrive()
	return false, nil
}

// undrive tells a route that lets waiters read (backend.Driver) that
// w's outcome is polled, not waited for: the route reads it itself.
func (w *WorkRequest) undrive() {
	if w.wr.Waited {
		if q := w.owner.Load(); q != nil && q.drv != nil {
			q.drv.Undrive(&w.wr)
		}
	}
}

// Err returns the outcome; nil while pending.
func (w *WorkRequest) Err() error {
	if w.state.Load() == stateDone { // the common case, small enough to inline
		return w.err
	}
	_, err := w.Poll()
	return err
}

// Wait blocks until the operation completes and returns its outcome. When
// ctx ends first, Wait cancels the operation and returns once the backend
// can no longer touch the local memory: the error is then ctx's (see the
// package doc for errors.Is), unless the operation completed first. Either
// way, when Wait returns the memory is the caller's again, and Err returns
// the same outcome.
func (w *WorkRequest) Wait(ctx context.Context) error {
	var spin spinner // spin.go: an outcome that comes soon costs no wake-up
	if q := w.owner.Load(); q != nil {
		if q.slow {
			spin.off = true // its route is slow: park at once
		} else if w.wr.Waited && q.drv != nil && w.state.Load() == statePending {
			q.drv.Drive(ctx, &w.wr) // reads its own answer if the route lends it the means
		}
	}
	for w.state.Load() == statePending && spin.more() {
	}
	spin.hit()
	if finished(w.settled()) || !w.park() {
		w.settled()
		return w.err
	}
	for {
		select {
		case <-w.sig:
			if w.tokenIsOutcome() {
				return w.err
			} // else an earlier use's token: wait on
		case <-ctx.Done():
			w.cancel(ctxCause(ctx))
			w.await()
			return w.err
		}
	}
}

// tokenIsOutcome is what a waiter that received a token on sig does with
// it: it reports true once the operation is done (a use's own token comes
// while its outcome is being reported or once it is done), and false,
// parked again, when the operation is still pending: the token was an
// earlier use's (a Wait or Cancel racing the re-post, a caller bug, can
// leave one that no re-arm drained), and this use's is still to come.
func (w *WorkRequest) tokenIsOutcome() bool {
	if finished(w.settled()) {
		return true
	}
	if !w.park() {
		w.settled()
		return true
	}
	return false
}

// await waits for the outcome's token (see tokenIsOutcome).
func (w *WorkRequest) await() {
	for {
		<-w.sig
		if w.tokenIsOutcome() {
			return
		}
	}
}

// Cancel ends the operation early with context.Canceled, waits until the
// backend can no longer touch its local memory and returns its outcome
// (nil if it completed first). Use either Cancel or Wait, not both.
func (w *WorkRequest) Cancel() error {
	if finished(w.settled()) || !w.park() {
		w.settled()
		return w.err
	}
	w.cancel(fmt.Errorf("queuepair: %w", context.Canceled))
	w.await()
	return w.err
}

// ctxCause is the error an operation ended by ctx reports: for a deadline
// rdmamgr.ErrDeadline (which matches context.DeadlineExceeded too), for a
// cancellation context.Canceled and ctx's cause if one was given.
func ctxCause(ctx context.Context) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("queuepair: context deadline: %w", rdmamgr.ErrDeadline)
	}
	if c := context.Cause(ctx); c != nil && c != err {
		return fmt.Errorf("queuepair: %w: %w", err, c)
	}
	return fmt.Errorf("queuepair: %w", err)
}
