package queuepair

import (
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// The loops of an inline run (runInline), each a function that calls
// nothing: Go keeps a loop's values in registers only when no call in it
// makes them live across one (bench/instr.sh counts what a reload costs).

// armRun arms ops[k:] of runInline's run (wrs, ops and iops as long as
// each other, ops[0] the run's first) on the local references lr holds
// spare, as runInline's loop would arm each, until one is not the run's
// or none is spare. It returns where it stopped, and refill: it stopped
// only because no reference was spare (lr.Refill may take more). It
// calls nothing, so its loop keeps the run's values in registers: the
// checks of plainOK, the route's (one remote region, inline sizes, host
// memory) and TakeSpare's, written out.
func (q *QueuePair) armRun(wrs []*WorkRequest, ops []Op, iops []qpbind.InlineOp, lr *memreg.LocalRun, k int, fast bool) (int, bool) {
	first := &ops[0]        // the run's remote region and local one: each operation's handles are compared with its
	sp, spare := lr.Spare() // read through: a register for each of its fields would be spilled
	start, end := k, len(ops)
	if left := int64(end - k); spare < left {
		end = k + int(spare)
	}
	wrs, iops = wrs[:len(ops)], iops[:len(ops)] // one bounds check each for the loop
	for ; k < end; k++ {
		o, w := &ops[k], wrs[k]
		r, l := &o.Remote, &o.Local
		n, off := l.Length, l.Offset
		need := buffer.AccessWrite
		if o.Op == backend.OpRead {
			need = buffer.AccessRead
		} else if o.Op != backend.OpWrite {
			break
		}
		// The remote handle: first's region and owner, as plainOK
		// checks it; a length the route copies inline.
		if r.Region != first.Remote.Region || r.Key != first.Remote.Key || r.OwnerID != q.peerID || r.Access&need == 0 {
			break
		}
		if n == 0 || n > uint64(q.inlMax) || n != r.Length || r.Offset+n < r.Offset {
			break
		}
		// The local handle: host memory in lr's region (TakeSpare's checks).
		if l.Region != sp.ID || l.OwnerID != sp.Owner || !memreg.KeyEqual(&l.Key, &sp.Key) || l.Location != buffer.Host || off > uint64(len(sp.Mem)) || n > uint64(len(sp.Mem))-off {
			break
		}
		// The request: idle, or done and reaped (read after the state: see
		// WorkRequest.queued); in no batch, not staged, not waited on,
		// bound to no other queue pair, not cancelled.
		s := w.state.Load()
		if s != stateIdle && (s != stateDone || w.queued) {
			break
		}
		if w.batch != nil || w.sig == nil {
			break
		}
		if w.want.Load() != 0 || w.staged.Load() {
			break
		}
		if w.owner.Load() != q || w.wr.CancelCause() != nil {
			break
		}
		mem := sp.Mem[off : off+n : off+n]
		w.state.setOwned(statePending) // from idle or done: the owner's alone (reqState.setOwned)
		// What a request's accessors read (size, Value); and no pointer
		// kept from an earlier use (an old ctx, a released region).
		w.wr.Op, w.wr.Local, w.wr.Result = o.Op, mem, 0
		w.wr.LocalRegion, w.wr.Cancel = nil, nil
		w.id = o.ID
		w.fast = fast
		w.unsig = o.Unsignaled // read by finishRun and pushRun (a pushed one failed); unrun sets it again
		io := &iops[k]         // field by field: a struct built and copied whole stalls on store forwarding (PostOps)
		io.Local, io.Offset, io.Op = mem, r.Offset, o.Op
	}
	lr.Used(int64(k - start))
	return k, k == end && end < len(ops)
}

// finishRun makes each request of a run the route took with no failure
// done, as runInline reports it: the successful unsignaled ones are
// counted in quiet (their slots go back), the others marked queued. It
// returns the ones a waiter asked to be signalled as a mask (bit j:
// wrs[j]; a run is at most runChunk long), read after each state as the
// signal handshake wants; the caller signals them. It calls nothing, so
// its loop keeps its values in registers.
func finishRun(wrs []*WorkRequest) (quiet int, wake uint64) {
	for j, w := range wrs {
		if w.err != nil { // the previous use's
			w.err = nil
		}
		if w.unsig {
			w.fast = false // its slot goes back (runInline)
			quiet++
		} else {
			w.queued = true
		}
		if !w.state.CompareAndSwap(statePending, stateDone) {
			panic("queuepair: an inline run's request completed twice") // only a route breaking backend.Completer's exactly once
		}
		if w.want.Load() != 0 {
			wake |= 1 << uint(j)
		}
	}
	return quiet, wake
}

// finishRunFailed is finishRun for a run with failures (or a test's
// hook): each request takes its outcome from errs, which it leaves nil;
// a failed unsignaled one is queued, and each is signalled in turn.
func finishRunFailed(wrs []*WorkRequest, errs []error) (quiet int) {
	for j, w := range wrs {
		if testHookFinishing != nil {
			testHookFinishing()
		}
		w.err, errs[j] = errs[j], nil
		if w.unsig && w.err == nil {
			w.fast = false // its slot goes back (runInline)
			quiet++
		} else {
			w.queued = true
		}
		if !w.state.CompareAndSwap(statePending, stateDone) {
			panic("queuepair: an inline run's request completed twice") // only a route breaking backend.Completer's exactly once
		}
		if w.want.Load() != 0 { // after the state: see "The signal handshake"
			w.signal()
		}
	}
	return quiet
}

// armChecked is armRun for a prepared chain (PrepareOps): pre[i] is
// ops[i], their handles checked once as p. It compares the local region
// lr holds references to with p's once, where armRun compares each
// handle; every check of the requests is armRun's. When lr's region is
// not p's (or is shorter than p reaches) it arms none and reports no
// refill: runInline then posts the rest as PostOps does.
func (q *QueuePair) armChecked(wrs []*WorkRequest, pre []preOp, iops []qpbind.InlineOp, lr *memreg.LocalRun, p *prepared, k int, fast bool) (int, bool) {
	sp, spare := lr.Spare()
	if spare == 0 {
		return k, k < len(pre)
	}
	if sp.ID != p.lreg || sp.Owner != p.lowner || !memreg.KeyEqual(&sp.Key, &p.lkey) || uint64(len(sp.Mem)) < p.lend {
		return k, false
	}
	if &sp.Mem[0] != p.base { // len(sp.Mem) >= p.lend > 0
		p.rebase(sp.Mem)
	}
	start, end := k, len(pre)
	if left := int64(end - k); spare < left {
		end = k + int(spare)
	}
	wrs, iops = wrs[:len(pre)], iops[:len(pre)] // one bounds check each for the loop
	for ; k < end; k++ {
		po, w := &pre[k], wrs[k]
		// The request, as armRun checks it (written out again: a function
		// holding these checks is over the inliner's budget, and a call
		// here would cost the loop its registers).
		s := w.state.Load()
		if s != stateIdle && (s != stateDone || w.queued) {
			break
		}
		if w.batch != nil || w.sig == nil {
			break
		}
		if w.want.Load() != 0 || w.staged.Load() {
			break
		}
		if w.owner.Load() != q || w.wr.CancelCause() != nil {
			break
		}
		w.state.setOwned(statePending)
		w.wr.Op, w.wr.Local, w.wr.Result = po.io.Op, po.io.Local, 0
		w.wr.LocalRegion, w.wr.Cancel = nil, nil
		w.id = po.id
		w.fast = fast
		w.unsig = po.unsig
		iops[k] = po.io // its bytes of sp.Mem (rebase)
	}
	lr.Used(int64(k - start))
	return k, k == end && end < len(pre)
}
