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
// references dropped with one atomic operation per region, pushed to
// their queue under one lock, and left from their queue pair's count at
// once. Any other is finished on its own.
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
		refs [runChunk]memreg.Ref
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
		if !w.state.CompareAndSwap(statePending, stateReporting) {
			continue // finished already (a cancel)
		}
		if w.cq == nil || w.batch != nil {
			w.report(errs[i])
			continue
		}
		if !w.start.IsZero() { // an observer's
			w.qp.observe(w, errs[i])
			w.start = time.Time{}
		}
		// One statement each: a tuple assignment copies the Ref through a
		// temporary, whose overlapping re-read stalls on store forwarding.
		refs[k] = w.ref
		w.ref = memreg.Ref{}
		ws[k], qs[k], cqs[k] = w, w.qp, w.cq
		w.qp, w.cq = nil, nil
		w.err = errs[i]
		if w.want.Load() != 0 { // after the CAS above: see "The signal handshake"
			w.signal()
		}
		if testHookFinishing != nil {
			testHookFinishing()
		}
		k++
	}
	if k == 0 {
		return
	}
	memreg.ReleaseAll(refs[:k]) // reported means finished: let go first
	for _, w := range ws[:k] {
		w.queued = true
		w.state.Store(stateDone)
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
