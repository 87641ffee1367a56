package queuepair

import (
	"context"
	"math/bits"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// runInline takes the run that starts ops on a route that copies small
// operations in the poster's goroutine (q.inl, shm): the Puts and Gets
// armFast would arm, each on the remote region of the first and at most
// the route's InlineMax bytes, up to runChunk of them. They are armed as
// armFast arms them but with no backend request built (the route copies
// them from a compact list, qpbind.InlineRunner), their local references
// taken from the chain's run and dropped together, and reported to the
// chain's completion queue as completeRun reports a run: the memory let
// go, each done with one atomic operation, pushed under one lock. It
// returns how many operations it took, each posted or reported: 0 when
// ops[0] starts no such run, and then it changed nothing. The requests
// of ready (armed before the run, in the chain's order) are posted before
// the run is copied, so the chain's operations reach the route in order.
// When the route declines the run (its region not mapped yet, say), the
// armed requests get their backend requests and join ready, as armFast's.
// p and pre, when not nil, are what PrepareOps checked of ops (pre[i] is
// ops[i]): armChecked arms them.
func (q *QueuePair) runInline(wrs []*WorkRequest, ops []Op, p *prepared, pre []preOp, ch *chainPrep, ready *[]*backend.WorkRequest, c context.Context, dl time.Time, cancel <-chan struct{}) (k int) {
	limit, max := min(len(ops), runChunk), uint64(q.inlMax)
	if o := &ops[0]; (o.Op != backend.OpWrite && o.Op != backend.OpRead) || o.Local.Length > max {
		return 0 // starts no run: not worth the scratch
	}
	sc := inlineScratch.Get().(*inlineRun) // not on the stack: the route's interface would move it to the heap
	iops, errs := &sc.ops, &sc.errs
	region, key := ops[0].Remote.Region, &ops[0].Remote.Key
	reported, given, dirty, fast := false, false, false, !q.slow
	defer func() {
		if !reported && k > 0 { // the route (or a flush) panicked: the run goes back to requests, which PostOps's handler posts
			if !given {
				ch.giveRun(int64(k), fast)
			}
			q.unrun(wrs[:k], ops[:k], iops[:k], ch, ready, dl, cancel)
		}
		clear(iops[:k]) // hold no memory past the post
		if dirty {
			clear(errs[:k]) // nil for the next run (RunInline)
		}
		inlineScratch.Put(sc)
	}()
	cq := ch.cq
	// Each operation takes a slot of cq and an entry of q.ops, given
	// together once the run is taken (giveRun).
	limit = int(min(int64(limit), ch.slots, ch.entries))
	for k < limit {
		var j int
		var refill bool
		if pre != nil {
			j, refill = q.armChecked(wrs[:limit], pre[:limit], iops[:limit], &ch.local, p, k, fast)
		} else {
			j, refill = q.armRun(wrs[:limit], ops[:limit], iops[:limit], &ch.local, k, fast)
		}
		k = j
		if k == limit || !refill || !ch.local.Refill(&ops[k].Local, ch.left-int64(k)) {
			break
		}
	}
	if k == 0 {
		return 0
	}
	ch.giveRun(int64(k), fast)
	given = true
	if len(*ready) > 0 { // the chain's operations before the run go first
		before := *ready
		*ready = (*ready)[:0] // taken: a panic in the flush does not post them again
		q.postList(before, c)
		clear(before)
	}
	dirty = true // errs may hold outcomes until cleared below
	failed, ok := q.inl.RunInline(region, *key, iops[:k], errs[:k])
	if !ok {
		reported = true
		q.unrun(wrs[:k], ops[:k], iops[:k], ch, ready, dl, cancel)
		return k
	}
	reported = true
	ch.local.Give(int64(k)) // reported means finished: let go first
	// A successful unsignaled operation is done and pushed nowhere (its
	// slot goes back); the others go to cq.
	var quiet int // successful unsignaled ones
	if failed == 0 && testHookFinishing == nil {
		dirty = false
		var wake uint64
		quiet, wake = finishRun(wrs[:k])
		for ; wake != 0; wake &= wake - 1 { // after the states: see "The signal handshake"
			wrs[bits.TrailingZeros64(wake)].signal()
		}
	} else {
		quiet = finishRunFailed(wrs[:k], errs[:k]) // leaves errs nil
		dirty = false
	}
	push := wrs[:k]
	if quiet > 0 { // gather the ones to push (the others are the poster's, done)
		cq.unslot(int64(quiet), fast)
		n := 0
		for _, w := range push {
			if w.queued {
				sc.push[n] = w
				n++
			}
		}
		push = sc.push[:n]
	}
	if f := q.fence.Load(); f != nil && f.out.Load() > 0 {
		// Unsignaled operations posted before the run are still out: its
		// signaled ones wait for them (fence.go).
		f.pushRun(push, cq)
	} else if len(push) > 0 {
		cq.pushAll(push) // the last touch of each w: its reaper may re-arm it at once
	}
	if quiet > 0 {
		clear(push) // sc's: hold no request past the post
	}
	q.ops.LeaveN(int64(k))
	return k
}

// unrun gives each armed request of a run the route did not take its
// backend request and local reference, as armFast arms it, and adds it
// to ready: posted as a request, the route says why.
func (q *QueuePair) unrun(wrs []*WorkRequest, ops []Op, iops []qpbind.InlineOp, ch *chainPrep, ready *[]*backend.WorkRequest, dl time.Time, cancel <-chan struct{}) {
	for j, w := range wrs {
		o := &ops[j]
		w.qp, w.cq = q, ch.cq     // the finisher's, as ch.give binds them
		q.enlist(w, o.Unsignaled) // as armFast: the run's were not
		ch.local.Hold(&o.Local, iops[j].Local, &w.ref)
		wr := &w.wr
		wr.Remote = o.Remote
		wr.LocalRegion = ch.local.Last()
		wr.Deadline, wr.Done, wr.Cancel = dl, (*completer)(w), cancel
		w.dlMono = 0
		wr.Via, wr.Origin, wr.Waited = 0, 0, false
		wr.Imm, wr.HasImm, wr.Compare, wr.Swap = 0, false, 0, 0
		if w.wr.CancelCause() != nil && !q.ready(w) { // a Cancel from elsewhere since the check: ready reported it
			continue
		}
		*ready = append(*ready, wr)
	}
}

// inlineRun is runInline's scratch: the run's operations and outcomes.
type inlineRun struct {
	ops  [runChunk]qpbind.InlineOp
	errs [runChunk]error
	push [runChunk]*WorkRequest
}

var inlineScratch = sync.Pool{New: func() any { return new(inlineRun) }}
