//go:build ibverbs

package ibverbs

import (
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
)

// completed handles the completion of one work request (called by the
// poller, or by teardown for work whose flush never came).
func (r *route) completed(c *chunk, status, vendorErr uint32) {
	if status != wcSuccess && status != wcWRFlushErr {
		r.fail(routeError(r.qp.qpn, status))
	}
	if c.op == nil { // keep-alive probe
		r.b.cqBudget.release(1)
		r.probing.Store(false)
		if status == wcSuccess {
			r.lastActive.Store(time.Now().UnixNano())
		}
		r.wrDone(1)
		return
	}
	o := c.op
	r.cellDone(c, status)
	switch status {
	case wcSuccess:
	case wcWRFlushErr:
		o.flushed.Store(true)
	default:
		e := error(&wcError{op: o.wr.Op, status: status, vendor: vendorErr})
		o.firstErr.CompareAndSwap(nil, &e)
	}
	r.sem.release(1)
	r.b.cqBudget.release(1)
	if status == wcSuccess {
		r.lastActive.Store(time.Now().UnixNano())
	}
	if o.remaining.Add(-1) == 0 {
		r.finish(o)
	}
	r.wrDone(1)
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
	r.opsMu.Lock()
	delete(r.ops, o)
	r.opsMu.Unlock()
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
