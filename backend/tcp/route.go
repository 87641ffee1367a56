package tcp

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
)

// route is the initiator's side of a route: N connections, a semaphore of
// in-flight chunks and a watchdog for deadlines and heartbeats. Done, Err
// and Stats come from the embedded routestate.State.
//
// Shutdown order: fail records the error, closes Done and then the
// connections; the connections' loops exit; the watchdog waits for them
// (drain), fails every chunk still held and closes drained; Close waits
// for drained.
type route struct {
	routestate.State

	b      *Backend
	peer   uint64
	conns  []*clientConn // fixed after Complete
	sem    *inflightSem  // room for chunks in flight
	next   atomic.Uint32 // round-robin start
	chunkN uint64

	kick chan struct{} // wakes the watchdog when work is posted or a read role parks

	// wantDrive: a waiter found no read role to take (Drive), and none
	// has since polled instead (Undrive): idle connections park their
	// readers for the next waiter (drive.go).
	wantDrive atomic.Bool

	fence fence // fence.go: notices after earlier WRITEs and atomics

	// farAgent: the responder said it is a host agent (responderAgentBit;
	// agentapi.FarAgent). Fixed after Complete.
	farAgent bool

	drained chan struct{} // closed once every chunk is completed after fail
	ioWG    sync.WaitGroup
	closeMu sync.Mutex // serialises Close
}

var _ backend.Route = (*route)(nil)

func newRoute(b *Backend, peer uint64) *route {
	r := &route{
		b:       b,
		peer:    peer,
		sem:     newInflightSem(b.cfg.MaxInFlight),
		drained: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		chunkN:  uint64(b.cfg.ChunkSize),
	}
	r.Init()
	return r
}

// Post splits wr into chunks and queues them: round-robin on the
// connections (a small single-chunk op in runs of smallRun), except the chunks of a write-imm or a send, which all go
// on the lane (the route's first connection), in posting order.
func (r *route) Post(wr *backend.WorkRequest) error {
	o, err := r.prepare(wr, nil)
	if err != nil {
		return err
	}
	wasIdle := r.Begin()
	r.queue(o)
	r.posted(wr, wasIdle)
	return nil
}

// prepare checks wr, takes its room in flight (from b's, or flushing b
// first, if not nil, when it has to wait for room) and splits it into an
// op. The caller counts it as posted (Begin) before it queues it.
func (r *route) prepare(wr *backend.WorkRequest, b *listBatch) (*op, error) {
	if err := routestate.ValidateAll("tcp", wr); err != nil {
		return nil, err
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	count, err := r.chunkCount(wr)
	if err != nil {
		return nil, err
	}
	if err := r.reserve(count, wr, b); err != nil {
		return nil, err
	}
	return newOp(r, wr, count), nil
}

// queue puts o's chunks on the connections' rings: a write-imm's or a
// send's all on the lane, in order; others striped round-robin from the
// next start, each connection's share as one chain (one lock, one
// wake-up).
func (r *route) queue(o *op) {
	if r.fenceHold(o) { // fence.go: a notice held behind earlier WRITEs and atomics
		// drive.go: the answers it waits for may be lent to a waiter
		// that waits for the notice first.
		r.unparkAll()
		return
	}
	if lane(o.wr) {
		r.conns[0].enqueue(link(o.chunks, 0, 1), true)
		return
	}
	r.fenceCount(o) // fence.go
	start, n := int(r.next.Add(1)), len(r.conns)
	if len(o.chunks) == 1 && len(o.wr.Local) <= coalesceMax {
		// Runs of small ops on one connection: their frames share
		// writevs, and their answers reads, as they would not if
		// striped one by one.
		start /= smallRun
	}
	for j := range min(n, len(o.chunks)) {
		r.conns[(start+j)%n].enqueue(link(o.chunks, j, n), true)
	}
}

// posted ends a post: an idle watchdog is woken. A cancel that came
// while wr was being queued was carried out by enqueue (or fenceHold):
// nothing here may act on wr, which may have completed and been posted
// again by now.
func (r *route) posted(wr *backend.WorkRequest, wasIdle bool) {
	if testHookQueued != nil {
		testHookQueued(wr)
	}
	if wasIdle { // only an idle watchdog sleeps past its tick
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// lane reports whether wr's chunks go on the lane.
func lane(wr *backend.WorkRequest) bool {
	return wr.Op == backend.OpWriteImm || wr.Op == backend.OpSend
}

// link chains chunks from, from+step, ... by next and returns the head.
func link(cs []chunk, from, step int) *chunk {
	var prev *chunk
	for i := from; i < len(cs); i += step {
		if prev != nil {
			prev.next = &cs[i]
		}
		prev = &cs[i]
	}
	return &cs[from]
}

// chunkCount returns the number of frames wr takes: one for an atomic
// and for a send (at most MaxFrameLen bytes), else one per chunk size, at
// most the in-flight limit.
func (r *route) chunkCount(wr *backend.WorkRequest) (int, error) {
	n := uint64(len(wr.Local))
	switch {
	case wr.Op.Atomic():
		return 1, nil
	case wr.Op == backend.OpSend:
		if n > uint64(r.b.cfg.MaxFrameLen) {
			return 0, fmt.Errorf("tcp: send of %d bytes, frame limit %d: %w", n, r.b.cfg.MaxFrameLen, rdmamgr.ErrLimit)
		}
		return 1, nil
	}
	count := (n + r.chunkN - 1) / r.chunkN
	if count > uint64(r.sem.max) {
		return 0, fmt.Errorf("tcp: %d-byte operation needs %d chunks, limit %d: %w", n, count, r.sem.max, rdmamgr.ErrLimit)
	}
	return int(count), nil
}

// reserve takes count units of the in-flight room, all of them before
// any chunk is queued, so a partly posted op never waits on itself. It
// waits (back-pressure) until there is room, wr's deadline passes, the
// route fails or wr's poster gives up. Only a wait reads the clock. A
// list being posted (b) is queued before the wait: its ops hold room
// that only their completion gives back.
func (r *route) reserve(count int, wr *backend.WorkRequest, b *listBatch) error {
	if b != nil && b.room >= count { // taken for the list already
		b.room -= count
		return nil
	}
	s, k := r.sem, int64(count)
	if s.tryTake(k) {
		return nil
	}
	if b != nil {
		b.flush()
		if b.room > 0 { // no waiting for room while holding some
			s.release(int64(b.room))
			b.room = 0
		}
	}
	r.unparkAll() // drive.go: an answer nobody reads gives no room back
	s.waiters.Add(1)
	defer s.waiters.Add(-1)
	timer := time.NewTimer(time.Until(wr.Deadline))
	defer timer.Stop()
	for {
		if s.tryTake(k) {
			if s.waiters.Load() > 1 {
				s.wake() // pass the wake-up on: there may be room left
			}
			return nil
		}
		select {
		case <-s.room:
		case <-timer.C:
			return fmt.Errorf("tcp: waiting for room in flight: %w", rdmamgr.ErrDeadline)
		case <-r.Done():
			return r.Err()
		case <-wr.Cancel:
			return fmt.Errorf("tcp: waiting for room in flight: %w", errCanceledWait)
		}
	}
}

// fail marks the route failed and closes its connections; the loops then
// exit and fail what is left.
func (r *route) fail(err error) {
	if r.SetFailed(err) {
		r.closeConns()
		r.unparkAll() // drive.go: a parked reader must see its connection closed
	}
}

// Fail ends the route with err (it should wrap rdmamgr.ErrPeerGone when
// the peer left): in-flight and later requests fail with it. Close still
// has to be called. The manager calls it when membership says the peer
// left.
func (r *route) Fail(err error) { r.fail(err) }

func (r *route) closeConns() {
	for _, cc := range r.conns {
		cc.c.Close()
	}
}

// Close fails in-flight work with ErrClosed and waits for the route's
// goroutines. Idempotent.
func (r *route) Close() error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	r.fail(fmt.Errorf("tcp: route closed: %w", rdmamgr.ErrClosed))
	<-r.drained
	r.b.mu.Lock()
	delete(r.b.routes, r)
	r.b.mu.Unlock()
	return nil
}

// watchdog fails chunks whose deadline passed while work is in flight, and
// keeps idle routes alive: a connection that has heard nothing for a
// heartbeat interval sends a ping, and one silent for PeerTimeout fails the
// route with ErrPeerGone. It returns once the route failed and drained.
func (r *route) watchdog() {
	defer r.b.wg.Done()
	cfg := r.b.cfg
	t := time.NewTicker(cfg.WatchdogInterval)
	defer t.Stop()
	idle := time.NewTimer(cfg.HeartbeatInterval)
	defer idle.Stop()
	for {
		if r.InFlight() == 0 && !r.parked() {
			idle.Reset(cfg.HeartbeatInterval)
			select {
			case <-r.kick:
			case <-idle.C:
				r.heartbeat(time.Now())
			case <-r.Done():
				r.drain()
				return
			}
			// Ticks count from now: a role parked or lent from here on
			// is reclaimed no sooner than a whole tick later (drive.go).
			t.Reset(cfg.WatchdogInterval)
			continue
		}
		select {
		case <-t.C:
		case <-r.Done():
			r.drain()
			return
		}
		now := time.Now()
		for _, cc := range r.conns {
			cc.expire(now)
			cc.reclaimStale() // drive.go
		}
		r.fenceExpire(now) // fence.go
		r.heartbeat(now)
	}
}

// heartbeat pings connections that heard nothing lately and fails the
// route when one stayed silent past PeerTimeout.
func (r *route) heartbeat(now time.Time) {
	cfg := r.b.cfg
	for _, cc := range r.conns {
		heard := cc.heard.Load()
		if heard != cc.lastHeard {
			cc.lastHeard, cc.lastHeardAt = heard, now
			continue
		}
		silent := now.Sub(cc.lastHeardAt)
		if silent >= cfg.PeerTimeout {
			r.fail(fmt.Errorf("tcp: peer silent for %v: %w", silent.Round(time.Millisecond), rdmamgr.ErrPeerGone))
			return
		}
		if silent >= cfg.HeartbeatInterval {
			// A full queue: the writer is alive and so is the traffic.
			_ = cc.push(pingChunk)
		}
	}
}

// drain waits for the connection loops, then fails whatever is left.
func (r *route) drain() {
	r.ioWG.Wait()
	err := r.Err()
	r.fenceClose(err) // fence.go: held notices, the releaser
	for _, cc := range r.conns {
		cc.failAll(err)
		r.b.untrackConn(cc.c)
	}
	close(r.drained)
}
