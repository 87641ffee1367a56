package queuepair

import (
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

var _ qpbind.RunCompleter = (*completer)(nil)

// runChunk is how many operations completeRun reports together.
const runChunk = 64

// CompleteRun implements qpbind.RunCompleter: the operations of the run
// bound to a completion queue are reported as finish reports each (the
// memory let go, then done, then pushed), but together: their local
// references dropped with one atomic operation per region (Ref.Detach,
// memreg.LeaveAll), pushed to their queue under one lock, and left from
// their queue pair's count at once. Any other is finished on its own.
//
// A run's operation goes from pending to done with one atomic operation,
// not finish's two (pending to reporting, which decides who reports, and
// then to done): the route completes each request exactly once
// (backend.Completer), so nobody else reports it, and what the
// reporting state kept from a waiter's sight (the outcome, the memory let
// go) is written before the state says done. Its signal comes after
// (see "The signal handshake": the state changes before want is read);
// the token cannot reach a later use, because w cannot be re-armed
// before its queue hands it over, after the push that follows the
// signal, and reset drains a token nobody took.
func (c *completer) CompleteRun(wrs []*backend.WorkRequest, errs []error) {
	for len(wrs) > 0 {
		n := min(len(wrs), runChunk)
		completeRun(wrs[:n], errs[:n])
		wrs, errs = wrs[n:], errs[n:]
	}
}

// completeRun is CompleteRun of at most runChunk operations.
func completeRun(wrs []*backend.WorkRequest, errs []error) {
	var (
		ws   [runChunk]*WorkRequest
		regs [runChunk]*memreg.Region
		qs   [runChunk]*QueuePair
		cqs  [runChunk]*CompletionQueue
	)
	k := 0
	for i, bw := range wrs {
		c, ok := bw.Done.(*completer)
		if !ok {
			bw.Done.Complete(bw, errs[i])
			continue
		}
		w := (*WorkRequest)(c)
		if w.cq == nil || w.batch != nil || w.unsig || w.fenced { // fenced ones: fence.go
			w.finish(errs[i])
			continue
		}
		if w.state.Load() != statePending {
			continue // finished already: ignored, as finish ignores it
		}
		if !w.start.IsZero() { // an observer's
			w.qp.observe(w, errs[i])
			w.start = time.Time{}
		}
		// The reference's region, not the whole Ref (a pointer copied,
		// not seven words copied and cleared twice).
		if regs[k] = w.ref.Detach(); regs[k] == nil {
			w.ref.Release() // none, a remote one or a proxy's: on its own
		}
		ws[k], qs[k], cqs[k] = w, w.qp, w.cq
		w.qp, w.cq = nil, nil
		w.err = errs[i]
		k++
	}
	if k == 0 {
		return
	}
	memreg.LeaveAll(regs[:k]) // reported means finished: let go first
	for _, w := range ws[:k] {
		if testHookFinishing != nil {
			testHookFinishing()
		}
		w.queued = true
		if !w.state.CompareAndSwap(statePending, stateDone) {
			// Only a second completer racing this one (a route breaking
			// backend.Completer's exactly once) gets here.
			panic("queuepair: a request of a run completed twice at once")
		}
		if w.want.Load() != 0 { // after the state: see "The signal handshake"
			w.signal()
		}
	}
	for i := 0; i < k; { // the last touch of each w: its reaper may re-arm it at once
		j := i + 1
		for j < k && cqs[j] == cqs[i] {
			j++
		}
		cqs[i].pushAll(ws[i:j])
		i = j
	}
	for i := 0; i < k; {
		j := i + 1
		for j < k && qs[j] == qs[i] {
			j++
		}
		if qs[i] != nil {
			qs[i].ops.LeaveN(int64(j - i))
		}
		i = j
	}
}

var _ qpbind.InlineCompleter = (*completer)(nil)

// CompleteInline implements qpbind.InlineCompleter: finish's report of an
// operation its route completed inside the Post that posted it, with one
// atomic operation from pending to done (finish takes two: pending to
// reporting, which decides who reports, then done). Nobody else reports
// it (backend.Completer's exactly once; the queue pair's own finishes
// come only before or instead of the route's Post), and the token a
// waiter wants is sent after done without reaching a later use: only the
// poster may re-arm w, and it is still in the Post. (A Wait, Cancel or
// first Done racing the post is a caller bug, as for reqState.setOwned;
// even so, a token it leaves never ends a later Wait or Cancel early:
// tokenIsOutcome.) One reported through a completion queue, a batch's or
// an observed one is finished as usual.
func (c *completer) CompleteInline(_ *backend.WorkRequest, err error) {
	w := (*WorkRequest)(c)
	if w.cq != nil || w.batch != nil || !w.start.IsZero() || w.state.Load() != statePending {
		w.finish(err)
		return
	}
	q := w.qp
	w.qp = nil
	w.err = err
	var rs [1]*memreg.Region
	var ref memreg.Ref
	if rs[0] = w.ref.Detach(); rs[0] == nil { // none, a remote one or a proxy's: released on its own
		ref = w.ref
		w.ref = memreg.Ref{}
	}
	if testHookFinishing != nil {
		testHookFinishing()
	}
	if !w.state.CompareAndSwap(statePending, stateDone) {
		panic("queuepair: an inline completion raced another") // a route breaking backend.Completer's exactly once
	}
	if w.want.Load() != 0 { // after the state: see "The signal handshake"
		w.signal()
	}
	// The local region is let go once the outcome is reported (as finish
	// does): whoever waits for its references then finds the operation
	// done.
	memreg.LeaveAll(rs[:])
	ref.Release()
	if q != nil {
		q.ops.Leave()
	}
}
