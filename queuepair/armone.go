package queuepair

import (
	"context"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/coarseclock"
)

// armOne arms and posts w for a Put or Get posted on its own, as prepare
// and post would: PostPut, PostGet, and PostOps of one operation (with its
// id); Put and Get make a new request, which prepare arms. Only for the
// common case: the operation passes the checks, its local handle is in the
// region q resolved last (q.near), w was last posted on q and is neither
// pending nor queued, no batch, no token to drain, no cancel cause, no
// observer, and ctx (nil: none) has not ended. unsig is Op.Unsignaled. It reports false, changing
// nothing, when the case is not that one: then prepare arms w.
//
// What it saves over prepare: reset's compare-and-swap of the state (a
// re-arm from idle or done is the owner's alone: reqState.setOwned, as
// armFast), the LocalRun and the Ref copied back through the stack
// (memreg.Registry.AcquireNear writes it in place), and prepare's
// branches for what this case has not.
func (q *QueuePair) armOne(w *WorkRequest, op backend.Op, local, remote *buffer.Buffer, ctx context.Context, id uint64, unsig bool) bool {
	s := w.state.Load()
	if q.obs != nil || q.reg == nil || !q.plainOK(op, local, remote) || local.Location != buffer.Host ||
		(s != stateIdle && s != stateDone) || (s == stateDone && w.queued) || // read after the state: see WorkRequest.queued
		w.batch != nil || w.sig == nil || w.want.Load() != 0 || w.staged.Load() ||
		w.owner.Load() != q || w.wr.CancelCause() != nil {
		return false
	}
	var cancel <-chan struct{}
	if ctx != nil {
		if ctx.Err() != nil { // prepare reports it
			return false
		}
		cancel = ctx.Done()
	}
	if !q.ops.Enter() { // released: prepare reports it
		return false
	}
	near := q.near.Load()
	mem := q.reg.AcquireNear(near, local, &w.ref)
	if mem == nil {
		q.ops.Leave()
		return false
	}
	cq := q.cq.Load()
	if cq != nil && !cq.reserve() { // full: prepare reports it
		w.ref.Release()
		q.ops.Leave()
		return false
	}
	w.state.setOwned(statePending) // from idle or done: the owner's alone (reqState.setOwned)
	wr := &w.wr
	wr.Remote = *remote // a statement of its own: see reset
	wr.Op, wr.Local, wr.LocalRegion = op, mem, near
	if m := coarseclock.Mono(); m != w.dlMono || q.timeout != w.dlFor || m == 0 { // else wr.Deadline is this tick's already
		wr.Deadline, w.dlMono, w.dlFor = coarseclock.DeadlineAt(m, q.timeout), m, q.timeout
	}
	wr.Done, wr.Cancel, wr.Result = (*completer)(w), cancel, 0
	wr.Via, wr.Origin = 0, 0
	wr.Imm, wr.HasImm, wr.Compare, wr.Swap = 0, false, 0, 0
	wr.Waited = q.drv != nil && cq == nil // backend.Driver: Wait may read its answer
	w.id = id
	if cq != nil {
		w.cq = cq
		if w.fast = !q.slow; w.fast {
			cq.fast.Add(1)
		}
		q.enlist(w, unsig)
	}
	w.qp = q
	if w.wr.CancelCause() != nil { // a Cancel from elsewhere since the check: ready reports it
		q.ready(w)
		return true
	}
	if testHookArmOne != nil {
		testHookArmOne()
	}
	if err := q.route.Post(wr); err != nil {
		q.postFailed(w, err, ctx)
	}
	return true
}

// testHookArmOne, when set (tests only), is called for each request
// armOne arms.
var testHookArmOne func()
