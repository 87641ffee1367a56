//go:build ibverbs

package ibverbs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// route is one RC queue pair to a peer. The initiator's routes are handed
// to the manager; accepted ones (the responder's queue pairs) only answer
// the peer's RDMA and send keep-alive probes.
type route struct {
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

	ops_, bytesPut, bytesGot, errs atomic.Uint64
	inflight                       atomic.Int64 // operations

	failOnce sync.Once
	err      atomic.Pointer[error]
	done     chan struct{} // closed by fail
	drained  chan struct{} // closed by teardown once the queue pair is gone
}

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
		done:      make(chan struct{}),
		drained:   make(chan struct{}),
	}
	r.lastActive.Store(time.Now().UnixNano())
	return r
}

func (r *route) Done() <-chan struct{} { return r.done }

func (r *route) Err() error {
	if p := r.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *route) Stats() backend.RouteStats {
	return backend.RouteStats{
		Ops:      r.ops_.Load(),
		BytesPut: r.bytesPut.Load(),
		BytesGot: r.bytesGot.Load(),
		Errors:   r.errs.Load(),
		InFlight: int(r.inflight.Load()),
	}
}

// Close moves the queue pair to the error state, waits until the device has
// flushed every work request (they fail with ErrClosed), destroys the queue
// pair and returns. Idempotent.
func (r *route) Close() error {
	r.fail(fmt.Errorf("ibverbs: route closed: %w", backend.ErrClosed))
	<-r.drained
	return nil
}

// Post splits wr into work requests of at most the device's message size
// and posts them as one chain.
func (r *route) Post(wr *backend.WorkRequest) error {
	b := r.b
	n := uint64(len(wr.Local))
	if n == 0 || n != wr.Remote.Length {
		return fmt.Errorf("ibverbs: local %d bytes, remote %d: %w", n, wr.Remote.Length, backend.ErrProtocol)
	}
	var opcode int
	switch wr.Op {
	case backend.OpWrite:
		opcode = wrRDMAWrite
	case backend.OpRead:
		opcode = wrRDMARead
	default:
		return fmt.Errorf("ibverbs: op %d: %w", wr.Op, backend.ErrProtocol)
	}
	if r.accepted {
		return fmt.Errorf("ibverbs: post on an accepted queue pair: %w", backend.ErrProtocol)
	}
	if wr.Remote.RDMA == (buffer.RDMAKey{}) {
		return fmt.Errorf("ibverbs: %v has no RDMA key (its owner has no RDMA backend): %w", wr.Remote, backend.ErrNotSupported)
	}
	raddr := wr.Remote.RDMA.Addr + wr.Remote.Offset
	if raddr < wr.Remote.RDMA.Addr || raddr+n < raddr {
		return fmt.Errorf("ibverbs: remote address %#x + %d + %d overflows: %w", wr.Remote.RDMA.Addr, wr.Remote.Offset, n, buffer.ErrOutOfRange)
	}
	lkey, laddr, err := r.localKey(wr)
	if err != nil {
		return err
	}
	count := int((n + b.maxMsg - 1) / b.maxMsg)
	if count > b.inflight {
		return fmt.Errorf("ibverbs: %d-byte operation needs %d work requests of at most %d bytes, limit %d: %w",
			n, count, b.maxMsg, b.inflight, backend.ErrLimit)
	}
	if err := r.Err(); err != nil {
		return err
	}
	if !wr.Deadline.IsZero() && time.Now().After(wr.Deadline) {
		return fmt.Errorf("ibverbs: %s of %d bytes posted after its deadline: %w", wr.Op, n, backend.ErrDeadline)
	}
	// Back-pressure: room on the queue pair, then on the completion queue.
	switch r.sem.acquire(count, wr.Deadline, r.done, wr.Cancel) {
	case semTimeout:
		return fmt.Errorf("ibverbs: waiting for room in flight: %w", backend.ErrDeadline)
	case semDone:
		return r.Err()
	case semCanceled:
		return fmt.Errorf("ibverbs: waiting for room in flight: %w", context.Canceled)
	}
	switch b.cqBudget.acquire(count, wr.Deadline, r.done, wr.Cancel) {
	case semTimeout:
		r.sem.release(count)
		return fmt.Errorf("ibverbs: waiting for room on the completion queue: %w", backend.ErrDeadline)
	case semDone:
		r.sem.release(count)
		return r.Err()
	case semCanceled:
		r.sem.release(count)
		return fmt.Errorf("ibverbs: waiting for room on the completion queue: %w", context.Canceled)
	}

	o := &op{wr: wr, r: r, chunks: make([]chunk, count)}
	o.remaining.Store(int32(count))
	batch := make(wrBuf, 0, count)
	ids := make([]uint64, count)
	for i := range count {
		off := uint64(i) * b.maxMsg
		ln := min(b.maxMsg, n-off)
		o.chunks[i] = chunk{r: r, op: o}
		ids[i] = b.slots.alloc(&o.chunks[i])
		batch.add(ids[i], laddr+off, raddr+off, uint32(ln), lkey, wr.Remote.RDMA.RKey, opcode)
	}

	r.postMu.Lock()
	if r.failing {
		r.postMu.Unlock()
		for _, id := range ids {
			b.slots.take(id)
		}
		r.sem.release(count)
		b.cqBudget.release(count)
		return r.Err()
	}
	r.opsMu.Lock()
	r.ops[o] = struct{}{}
	r.opsMu.Unlock()
	r.inflight.Add(1)
	r.outstanding.Add(int64(count))
	r.lastActive.Store(time.Now().UnixNano())
	posted, perr := r.qp.post(batch)
	r.postMu.Unlock()
	if perr == nil {
		if wr.CancelCause() != nil { // cancelled while it was being posted
			r.Cancel(wr)
		}
		b.kickWatchdog()
		return nil
	}

	// The chunks from posted on were not accepted: the device never saw
	// them. The queue pair is in trouble; fail the route so that what was
	// posted is flushed.
	left := count - posted
	for _, id := range ids[posted:] {
		b.slots.take(id)
	}
	r.sem.release(left)
	b.cqBudget.release(left)
	r.fail(fmt.Errorf("ibverbs: route failed: %w: %w", perr, backend.ErrClosed))
	if posted == 0 {
		r.opsMu.Lock()
		delete(r.ops, o)
		r.opsMu.Unlock()
		r.inflight.Add(-1)
		r.wrDone(int64(left))
		return fmt.Errorf("%w: %w", perr, backend.ErrClosed)
	}
	e := fmt.Errorf("%w: %w", perr, backend.ErrClosed)
	o.firstErr.CompareAndSwap(nil, &e)
	if o.remaining.Add(-int32(left)) == 0 {
		r.finish(o)
	}
	r.wrDone(int64(left))
	return nil
}

// localKey checks that wr.Local lies in wr.LocalRegion, which this backend
// registered, and returns its lkey and address.
func (r *route) localKey(wr *backend.WorkRequest) (uint32, uint64, error) {
	reg := wr.LocalRegion
	if reg == nil {
		return 0, 0, fmt.Errorf("ibverbs: work request without its local region: %w", buffer.ErrInvalid)
	}
	rd, ok := reg.BackendData.(*regData)
	if !ok || rd.b != r.b {
		return 0, 0, fmt.Errorf("ibverbs: local region %d is not registered with this device: %w", reg.ID(), backend.ErrNotSupported)
	}
	mem := reg.Mem()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(wr.Local)))
	if p < base || p-base > uintptr(len(mem)) || uintptr(len(wr.Local)) > uintptr(len(mem))-(p-base) {
		return 0, 0, fmt.Errorf("ibverbs: local memory is not inside region %d: %w", reg.ID(), buffer.ErrOutOfRange)
	}
	return rd.local.lkey, uint64(p), nil
}

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

// finish reports the outcome of o, exactly once.
func (r *route) finish(o *op) {
	r.opsMu.Lock()
	delete(r.ops, o)
	r.opsMu.Unlock()
	r.inflight.Add(-1)
	var err error
	switch p := o.firstErr.Load(); {
	case o.canceled.Load() != nil:
		err = *o.canceled.Load()
	case p == nil && !o.flushed.Load():
	case o.expired.Load():
		err = fmt.Errorf("ibverbs: %s of %d bytes: %w", o.wr.Op, len(o.wr.Local), backend.ErrDeadline)
	case p != nil:
		err = *p
	default:
		err = r.Err()
		if err == nil {
			err = backend.ErrClosed
		}
	}
	if err != nil {
		r.errs.Add(1)
	} else {
		r.ops_.Add(1)
		if o.wr.Op == backend.OpWrite {
			r.bytesPut.Add(uint64(len(o.wr.Local)))
		} else {
			r.bytesGot.Add(uint64(len(o.wr.Local)))
		}
	}
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

// fail marks the route failed with err (the first cause wins), stops new
// posts and moves the queue pair to the error state; teardown then waits
// for the flushed completions and destroys the queue pair.
func (r *route) fail(err error) {
	r.failOnce.Do(func() {
		r.err.Store(&err)
		r.postMu.Lock()
		r.failing = true
		r.postMu.Unlock()
		close(r.done)
		if e := r.qp.toErr(); e != nil {
			r.b.log.Warn("queue pair to error state", "err", e)
		}
		r.b.log.Debug("queue pair failed", "qp", r.qp.qpn, "accepted", r.accepted,
			"peer", fmt.Sprintf("%016x", r.peer), "err", err)
		r.b.wg.Add(1)
		go r.teardown()
	})
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

// expire marks operations past their deadline: they complete with
// ErrDeadline once the device is done with them. An RC queue pair cannot
// take one work request back, and moving it to the error state would fail
// every neighbour on the route, so the device finishes what it was given:
// the queue pair's transport timeouts (AckTimeout × RetryCount) bound
// that, and a work request that fails them fails the route with
// ErrPeerGone. Only an operation still held DrainTimeout past its deadline,
// a device that ignores its own timeouts, fails the route here.
func (r *route) expire(now time.Time) {
	stuck := false
	r.opsMu.Lock()
	for o := range r.ops {
		d := o.wr.Deadline
		if d.IsZero() || !now.After(d) {
			continue
		}
		o.expired.Store(true)
		if now.Sub(d) > r.b.cfg.DrainTimeout {
			stuck = true
		}
	}
	r.opsMu.Unlock()
	if stuck {
		r.fail(fmt.Errorf("ibverbs: route failed: a request is held %v past its deadline: %w", r.b.cfg.DrainTimeout, backend.ErrPeerGone))
	}
}

// Cancel implements backend.Route: the operation completes with its cause
// once the device has finished the work requests it was given (see expire).
func (r *route) Cancel(wr *backend.WorkRequest) {
	cause := wr.CancelCause()
	if cause == nil {
		return
	}
	err := fmt.Errorf("ibverbs: %s of %d bytes: %w", wr.Op, len(wr.Local), cause)
	r.opsMu.Lock()
	for o := range r.ops {
		if o.wr == wr {
			o.canceled.CompareAndSwap(nil, &err)
		}
	}
	r.opsMu.Unlock()
}

// keepAlive probes the peer with a zero-length RDMA WRITE when the queue
// pair has been idle for d; a failed probe fails the route (a dead peer:
// backend.ErrPeerGone).
func (r *route) keepAlive(now time.Time, d time.Duration) {
	if r.outstanding.Load() > 0 || r.probing.Load() || now.UnixNano()-r.lastActive.Load() < int64(d) {
		return
	}
	if !r.b.cqBudget.tryAcquire(1) {
		return
	}
	r.postMu.Lock()
	if r.failing {
		r.postMu.Unlock()
		r.b.cqBudget.release(1)
		return
	}
	r.probing.Store(true)
	r.outstanding.Add(1)
	r.lastActive.Store(now.UnixNano())
	id := r.b.slots.alloc(&chunk{r: r})
	err := r.qp.postProbe(id)
	r.postMu.Unlock()
	if err != nil {
		r.b.slots.take(id)
		r.b.cqBudget.release(1)
		r.probing.Store(false)
		r.wrDone(1)
		r.fail(fmt.Errorf("ibverbs: keep-alive: %w: %w", err, backend.ErrClosed))
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
		return buffer.ErrAccess
	case wcRetryExcErr, wcRNRRetryErr:
		return backend.ErrPeerGone
	case wcWRFlushErr:
		return backend.ErrClosed
	case wcLocProtErr, wcLocLenErr:
		return buffer.ErrInvalid
	}
	return backend.ErrProtocol
}

// routeError is the route's error after a failed completion on its queue
// pair: the queue pair is in the error state, so the route is done. Work
// flushed by it fails with this error.
func routeError(qpn uint32, status uint32) error {
	if s := statusSentinel(status); s == backend.ErrPeerGone {
		return fmt.Errorf("ibverbs: queue pair %d: peer gone: %s: %w", qpn, wcStatusStr(status), backend.ErrPeerGone)
	}
	return fmt.Errorf("ibverbs: queue pair %d in error state after %q on another request: %w", qpn, wcStatusStr(status), backend.ErrClosed)
}
