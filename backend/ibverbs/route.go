//go:build ibverbs

package ibverbs

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
)

// route is one RC queue pair to a peer. The initiator's routes are handed
// to the manager; accepted ones (the responder's queue pairs) only answer
// the peer's RDMA and send keep-alive probes. Done, Err and Stats come
// from the embedded routestate.State.
//
// Shutdown order: fail records the error and closes Done, stops new posts
// (failing) and moves the queue pair to the error state; teardown waits for
// the device to flush every work request, destroys the queue pair, fails
// what is left and closes drained; Close waits for drained.
type route struct {
	routestate.State

	b        *Backend
	peer     uint64
	qp       *queuePair
	accepted bool
	sem      *wsem // work requests in flight on the queue pair

	// postMu orders posts against fail: once failing is set no work
	// request is posted, so the flush that follows covers every one.
	postMu  sync.Mutex
	failing bool
	// outstanding counts work requests posted and not yet completed
	// (probes included); teardown waits for it to reach zero.
	outstanding atomic.Int64
	drainKick   chan struct{}
	probing     atomic.Bool
	lastActive  atomic.Int64 // unix nanoseconds of the last post or completion

	opsMu sync.Mutex
	ops   map[*op]struct{}

	drained chan struct{} // closed by teardown once the queue pair is gone
}

var _ backend.Route = (*route)(nil)

// op is one posted work request, split into chunks of at most maxMsg.
type op struct {
	wr        *backend.WorkRequest
	r         *route
	chunks    []chunk
	remaining atomic.Int32
	firstErr  atomic.Pointer[error]
	flushed   atomic.Bool           // a chunk was flushed (the route failed)
	expired   atomic.Bool           // the watchdog found it past its deadline
	canceled  atomic.Pointer[error] // why the poster cancelled it
}

// chunk is one work request; op is nil for a keep-alive probe.
type chunk struct {
	r  *route
	op *op
}

func newRoute(b *Backend, peer uint64, qp *queuePair, accepted bool) *route {
	r := &route{
		b:         b,
		peer:      peer,
		qp:        qp,
		accepted:  accepted,
		sem:       newWsem(b.inflight),
		drainKick: make(chan struct{}, 1),
		ops:       make(map[*op]struct{}),
		drained:   make(chan struct{}),
	}
	r.Init()
	r.lastActive.Store(time.Now().UnixNano())
	return r
}

// Close moves the queue pair to the error state, waits until the device has
// flushed every work request (they fail with ErrClosed), destroys the queue
// pair and returns. Idempotent.
func (r *route) Close() error {
	r.fail(fmt.Errorf("ibverbs: route closed: %w", backend.ErrClosed))
	<-r.drained
	return nil
}

// fail marks the route failed with err (the first cause wins), stops new
// posts and moves the queue pair to the error state; teardown then waits
// for the flushed completions and destroys the queue pair.
func (r *route) fail(err error) {
	if !r.SetFailed(err) {
		return
	}
	r.postMu.Lock()
	r.failing = true
	r.postMu.Unlock()
	if e := r.qp.toErr(); e != nil {
		r.b.log.Warn("queue pair to error state", "err", e)
	}
	r.b.log.Debug("queue pair failed", "qp", r.qp.qpn, "accepted", r.accepted,
		"peer", fmt.Sprintf("%016x", r.peer), "err", err)
	r.b.wg.Add(1)
	go r.teardown()
}

// teardown waits until the device completed (flushed) every work request
// of the queue pair, or DrainTimeout passed, destroys the queue pair - after
// which the device touches none of its memory - and fails what is left.
func (r *route) teardown() {
	b := r.b
	defer b.wg.Done()
	timer := time.NewTimer(b.cfg.DrainTimeout)
	defer timer.Stop()
wait:
	for r.outstanding.Load() > 0 {
		select {
		case <-r.drainKick:
		case <-timer.C:
			b.log.Warn("flushed completions did not all arrive; destroying the queue pair",
				"qp", r.qp.qpn, "outstanding", r.outstanding.Load())
			break wait
		}
	}
	b.mu.Lock()
	if b.byQPN[r.qp.qpn] == r {
		delete(b.byQPN, r.qp.qpn)
	}
	b.mu.Unlock()
	b.dropQP(r.qp)
	for _, c := range b.slots.takeRoute(r) {
		r.completed(c, wcWRFlushErr, 0)
	}
	b.mu.Lock()
	delete(b.routes, r)
	b.mu.Unlock()
	close(r.drained)
}

// Cancel implements backend.Route: the operation completes with its cause
// once the device has finished the work requests it was given (see expire).
func (r *route) Cancel(wr *backend.WorkRequest) {
	cause := wr.CancelCause()
	if cause == nil {
		return
	}
	err := routestate.OpError("ibverbs", wr, cause)
	r.opsMu.Lock()
	for o := range r.ops {
		if o.wr == wr {
			o.canceled.CompareAndSwap(nil, &err)
		}
	}
	r.opsMu.Unlock()
}
