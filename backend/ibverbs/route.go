//go:build ibverbs

package ibverbs

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
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

	b    *Backend
	peer uint64
	qp   *queuePair
	ring *ring // the control ring and cells (ring.go)
	// ringMu is held for reading by a poster (Post, PostList) while it
	// prepares and submits, for it writes control messages into the
	// ring's cells before the chain is posted; teardown holds it to free
	// the ring, so no poster racing a Close writes a freed ring.
	ringMu   sync.RWMutex
	accepted bool
	sem      *wsem // work requests in flight on the queue pair
	// credits bounds the initiator's control messages (notices and
	// Sends) not yet acked: no more than the smaller of both rings.
	credits *wsem
	atomics bool // both devices run atomics
	maxSend int  // the largest Send the peer takes

	// postMu orders posts against fail: once failing is set no work
	// request is posted, so the flush that follows covers every one. The
	// poller holds it while it reads the ring, so teardown frees the ring
	// only once no one does.
	postMu  sync.Mutex
	failing bool
	seq     uint32   // under postMu: the next control message's number
	backlog []ackMsg // under postMu: acks waiting for a cell (ackLocked)
	ackBusy int      // under postMu: cells in use by acks

	ackMu sync.Mutex
	acks  []*op // under ackMu: the initiator's ops awaiting their ack, in posting order
	// outstanding counts work requests posted and not yet completed
	// (probes included); teardown waits for it to reach zero.
	outstanding atomic.Int64
	drainKick   chan struct{}
	probing     atomic.Bool
	lastActive  atomic.Int64  // the coarse clock at the last completion
	doorbells   atomic.Uint64 // ibv_post_send calls (tests)

	table opTable // the ops posted and not reported

	// Host agents (via.go, via_serve.go). peerAgent: the peer's info
	// says host agent (as a responder it serves operations with a Via;
	// as an initiator its notices and Sends may carry an origin).
	// agentServe: accepted while this backend had a resolver; a worker
	// serves its control messages (work).
	peerAgent  bool
	agentServe bool
	work       chan ctlWork
	viaMu      sync.Mutex
	viaCache   map[viaKey]*viaEntry       // under viaMu: the initiator's resolutions
	viaLive    map[*viaEntry]struct{}     // under viaMu: those cached or in use (via_inval.go)
	invalPend  int                        // under viaMu: invalidates waiting for ops to end
	resolving  map[uint32]*pendingResolve // under viaMu: resolves sent, by sequence number

	// The owner's invalidates (via_inval.go): invalTok bounds those not
	// yet acked; invals (under viaMu) are they, by invalSeq (under
	// postMu); bye is closed once the goodbye was sent (its cell: byeCell
	// + 1, under postMu).
	invalTok chan struct{}
	invalSeq uint32
	invals   map[uint32]*invalWait
	bye      chan struct{}
	byeCell  int

	drained chan struct{} // closed by teardown once the queue pair is gone

	// fb is the initiator's fallback route (fallback.go; nil without
	// one): set up with the queue pair, failing it when it fails, closed
	// by teardown.
	fb backend.Route
}

var _ backend.Route = (*route)(nil)

// op is one posted work request, split into chunks of at most maxMsg (and
// a notice: OpWriteImm). remaining counts its chunks not yet completed and,
// with ack, the owner's ack.
type op struct {
	wr        *backend.WorkRequest
	r         *route
	chunks    []chunk
	ack       bool     // a notice or Send: the owner acks it
	seq       uint32   // its control message's number (ack)
	ctlCell   int      // the cell of its control message (ack)
	result    uint64   // an atomic's old value
	first     int      // its first work request's index in its chain
	idx       int32    // its index in the route's opTable
	one       [1]chunk // chunks of a one-work-request op
	remaining atomic.Int32
	firstErr  atomic.Pointer[error]
	flushed   atomic.Bool           // a chunk was flushed (the route failed)
	expired   atomic.Bool           // the watchdog found it past its deadline
	canceled  atomic.Pointer[error] // why the poster cancelled it
	ve        *viaEntry             // the far agent's proxy it uses (Via), held until it ends
}

// chunk is one work request; op is nil for a keep-alive probe and for a
// resolve (res). cell is 1 + the ring cell it uses (0: none).
type chunk struct {
	r    *route
	op   *op
	cell int
	res  *pendingResolve
}

// ackMsg is an ack the owner has yet to send: of a notice or Send
// (ctlAck, kind 0), the answer to a resolve (ctlResolved, with res
// when code is OK), an invalidate or a goodbye; or the initiator's
// invalidate ack (ctlInvalAck). They go out in order, each in a cell.
type ackMsg struct {
	seq, code uint32
	kind      uint8
	res       *viaRes
	proxy     uint64 // ctlInvalidate, ctlInvalAck
}

// newRoute returns the route of qp and g, connected to the peer that sent
// info, with the fallback route fb (nil: none), which it owns.
func newRoute(b *Backend, peer uint64, qp *queuePair, g *ring, accepted bool, info routeInfo, fb backend.Route) *route {
	r := &route{
		b:         b,
		peer:      peer,
		qp:        qp,
		ring:      g,
		accepted:  accepted,
		credits:   newWsem(min(b.cfg.RecvSlots, int(info.recvSlots))),
		atomics:   b.atomics && info.atomics(),
		maxSend:   int(info.maxSend),
		sem:       newWsem(b.inflight),
		drainKick: make(chan struct{}, 1),
		drained:   make(chan struct{}),
		peerAgent: info.flags&infoAgent != 0,
		fb:        fb,
	}
	if !accepted {
		r.viaCache = make(map[viaKey]*viaEntry)
		r.viaLive = make(map[*viaEntry]struct{})
		r.resolving = make(map[uint32]*pendingResolve)
	} else {
		r.invalTok = make(chan struct{}, maxInvalidates)
		r.invals = make(map[uint32]*invalWait)
	}
	r.Init()
	r.lastActive.Store(time.Now().UnixNano())
	r.table.init(b.inflight)
	if fb != nil {
		b.wg.Add(1)
		go r.watchFallback()
	}
	return r
}

// watchFallback fails the route when its fallback route fails (and ends
// when the route does).
func (r *route) watchFallback() {
	defer r.b.wg.Done()
	select {
	case <-r.fb.Done():
		r.fail(fmt.Errorf("ibverbs: fallback route: %w", r.fb.Err()))
	case <-r.Done():
	}
}

// Stats implements backend.Route: the queue pair's and the fallback
// route's.
func (r *route) Stats() backend.RouteStats {
	s := r.State.Stats()
	if r.fb != nil {
		s = addStats(s, r.fb.Stats())
	}
	return s
}

// Close moves the queue pair to the error state, waits until the device has
// flushed every work request (they fail with ErrClosed), destroys the queue
// pair, closes the fallback route (its operations fail with ErrClosed,
// reported before it returns) and returns. Idempotent.
func (r *route) Close() error {
	r.fail(fmt.Errorf("ibverbs: route closed: %w", rdmamgr.ErrClosed))
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
	// Posters still preparing see the route failing (r.Done: their waits
	// end) and do not post; the ring goes once none writes it.
	r.ringMu.Lock()
	b.dropQP(r.qp, r.ring, r.outstanding.Load() == 0)
	r.ringMu.Unlock()
	for _, c := range b.slots.takeRoute(r) {
		r.completed(c, wcWRFlushErr, 0)
	}
	for _, o := range r.takeAcks() {
		o.flushed.Store(true)
		if o.remaining.Add(-1) == 0 {
			r.finish(o)
		}
	}
	if r.fb != nil {
		r.fb.Close() // waits until its operations are reported
	}
	b.mu.Lock()
	delete(b.routes, r)
	b.mu.Unlock()
	close(r.drained)
}

// takeAcks empties the queue of ops awaiting their ack.
func (r *route) takeAcks() []*op {
	r.ackMu.Lock()
	defer r.ackMu.Unlock()
	acks := r.acks
	r.acks = nil
	return acks
}

// Cancel implements backend.Route: the operation completes with its cause
// once the device has finished the work requests it was given (see expire);
// one on the fallback route is the fallback's to cancel.
func (r *route) Cancel(wr *backend.WorkRequest) {
	cause := wr.CancelCause()
	if cause == nil {
		return
	}
	if r.fb != nil && toFallback(wr) {
		r.fb.Cancel(wr)
		return
	}
	err := routestate.OpError("ibverbs", wr, cause)
	r.table.each(func(o *op) {
		if o.wr == wr {
			o.canceled.CompareAndSwap(nil, &err)
		}
	})
}

// atomics reports whether the sender of ri runs atomics (here, not in
// info.go: only the ibverbs build reads it).
func (ri *routeInfo) atomics() bool { return ri.flags&infoAtomics != 0 }
