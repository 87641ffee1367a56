//go:build ibverbs

package ibverbs

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
)

// done is one work completion matched to its chunk.
type done struct {
	c              *chunk
	status, vendor uint32
}

// completed handles the completion of one work request (teardown, for
// work whose flush never came).
func (r *route) completed(c *chunk, status, vendorErr uint32) {
	r.b.completeBatch([]done{{c: c, status: status, vendor: vendorErr}})
}

// completeBatch handles a batch of work completions (the poller's, of one
// ibv_poll_cq): first what each one settles (cells, statuses) and the room
// they free, given back in one call per route run and one for the
// completion queue, so that an op reported next finds it; then the ops
// they finish; then the work requests each route is done with.
func (b *Backend) completeBatch(ds []done) {
	now := b.coarse.Load()
	var run *route // the route of the current run of completions
	runN := 0
	for i := range ds {
		d := &ds[i]
		r := d.c.r
		if r != run {
			if runN > 0 {
				run.sem.release(runN)
			}
			run, runN = r, 0
		}
		if d.status != wcSuccess && d.status != wcWRFlushErr {
			r.fail(routeError(r.qp.qpn, d.status))
		}
		if d.status == wcSuccess {
			r.lastActive.Store(now)
		}
		o := d.c.op
		if o == nil {
			if d.c.res == nil { // keep-alive probe
				r.probing.Store(false)
				continue
			}
			// A resolve's send: its answer (or the route's end) wakes
			// its poster.
			r.ring.freeCell(d.c.cell - 1)
			d.c.cell = 0
			runN++
			continue
		}
		r.cellDone(d.c, d.status)
		switch d.status {
		case wcSuccess:
		case wcWRFlushErr:
			o.flushed.Store(true)
		default:
			e := error(&wcError{op: o.wr.Op, status: d.status, vendor: d.vendor})
			if d.status == wcRemAccessErr && o.wr.Via != 0 && o.wr.Op != backend.OpSend {
				e = r.staleProxy(o.wr, e)
			}
			o.firstErr.CompareAndSwap(nil, &e)
		}
		runN++
	}
	if runN > 0 {
		run.sem.release(runN)
	}
	b.cqBudget.release(len(ds))
	for i := range ds {
		if o := ds[i].c.op; o != nil && o.remaining.Add(-1) == 0 {
			o.r.finish(o)
		}
	}
	run, runN = nil, 0
	for i := range ds {
		if r := ds[i].c.r; r != run {
			if runN > 0 {
				run.wrDone(int64(runN))
			}
			run, runN = r, 0
		}
		runN++
	}
	if runN > 0 {
		run.wrDone(int64(runN))
	}
}

// acked handles the owner's ack of o (its code: err); it is o's last part
// unless its work requests are still to complete.
func (r *route) acked(o *op, err error) {
	if err != nil {
		o.firstErr.CompareAndSwap(nil, &err)
	}
	if o.remaining.Add(-1) == 0 {
		r.finish(o)
	}
}

// finish reports the outcome of o, exactly once.
func (r *route) finish(o *op) {
	r.table.remove(o)
	var err error
	switch p := o.firstErr.Load(); {
	case o.canceled.Load() != nil:
		err = *o.canceled.Load()
	case p == nil && !o.flushed.Load():
	case o.expired.Load():
		err = routestate.OpError("ibverbs", o.wr, rdmamgr.ErrDeadline)
	case p != nil:
		err = *p
	default:
		err = r.Err()
		if err == nil {
			err = rdmamgr.ErrClosed
		}
	}
	if err == nil && o.wr.Op.Atomic() {
		o.wr.Result = o.result
	}
	if o.ve != nil { // its work requests are done: the proxy's rkey is not in use by it
		r.viaRelease(o.ve)
		o.ve = nil
	}
	r.End(o.wr, err)
	o.wr.Done.Complete(o.wr, err)
}

// wrDone accounts for k work requests that the device is done with.
func (r *route) wrDone(k int64) {
	if r.outstanding.Add(-k) == 0 {
		select {
		case r.drainKick <- struct{}{}:
		default:
		}
	}
}

// wcError is a failed work completion.
type wcError struct {
	op     backend.Op
	status uint32
	vendor uint32
}

func (e *wcError) Error() string {
	return fmt.Sprintf("ibverbs: rdma %s failed: %s (wc status %d, vendor error %#x)", e.op, wcStatusStr(e.status), e.status, e.vendor)
}

// Unwrap maps the status to the sentinel callers compare with.
func (e *wcError) Unwrap() error { return statusSentinel(e.status) }

func statusSentinel(status uint32) error {
	switch status {
	case wcRemAccessErr:
		return rdmamgr.ErrAccess
	case wcRetryExcErr, wcRNRRetryErr:
		return rdmamgr.ErrPeerGone
	case wcWRFlushErr:
		return rdmamgr.ErrClosed
	case wcLocProtErr, wcLocLenErr:
		return rdmamgr.ErrInvalid
	}
	return rdmamgr.ErrProtocol
}

// routeError is the route's error after a failed completion on its queue
// pair: the queue pair is in the error state, so the route is done. Work
// flushed by it fails with this error.
func routeError(qpn uint32, status uint32) error {
	if s := statusSentinel(status); s == rdmamgr.ErrPeerGone {
		return fmt.Errorf("ibverbs: queue pair %d: peer gone: %s: %w", qpn, wcStatusStr(status), rdmamgr.ErrPeerGone)
	}
	return fmt.Errorf("ibverbs: queue pair %d in error state after %q on another request: %w", qpn, wcStatusStr(status), rdmamgr.ErrClosed)
}
