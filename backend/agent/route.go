package agent

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// pending is the initiator's route between PrepareRoute and Complete.
type pending struct {
	b *Backend
	a *attachment
}

// Complete binds the route to the attachment PrepareRoute saw. Should the
// agent have gone in between, it refuses with ErrNotSupported, so the
// manager tries the next backend.
func (p *pending) Complete(ctx context.Context, peerInfo []byte) (backend.Route, error) {
	ans, err := decodeAnswer(peerInfo)
	if err != nil {
		return nil, err
	}
	over := p.a.overOf(ctx, ans.agent)
	r := &route{a: p.a, via: ans.slot, far: ans.agent, farID: ans.agentID, over: over, ids: make(map[*backend.WorkRequest]uint64),
		room: make(chan struct{}, p.b.cfg.MaxInFlight), done: make(chan struct{}), idle: make(chan struct{}),
		closeTimeout: p.b.cfg.CloseTimeout}
	a := p.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		return nil, fmt.Errorf("agent: %s during the handshake: %w", errAgentGone, rdmamgr.ErrNotSupported)
	}
	a.routes[r] = struct{}{}
	return r, nil
}

// Abort: nothing was set up.
func (p *pending) Abort() {}

// route forwards work requests to the agent, which posts them on its route
// to the far agent with via = the target's slot there.
type route struct {
	a   *attachment
	via uint16 // the target's slot at its agent
	far string // the target's agent's actor address
	// farID is that agent's manager id: via is its slot, and the far
	// route's peer must be it (a restarted agent's slots are new).
	farID uint64
	// over says the agents' route's backend (overOf), for Via.
	over string

	room         chan struct{} // a token per operation in flight
	closeTimeout time.Duration

	// Guarded by a.mu:
	ids map[*backend.WorkRequest]uint64 // in flight
	// finishing counts the requests no longer in ids whose completion is
	// not delivered yet (finish): Close waits for them too.
	finishing int
	closed    bool
	idleSet   bool
	idle      chan struct{} // closed once closed and nothing is in flight

	failOnce sync.Once
	err      atomic.Pointer[error]
	done     chan struct{}

	ops, put, got, errs atomic.Uint64
}

// Via says where the route goes, for its reason (status, the "route up"
// log): the manager appends it. It ends with the agents' route's backend
// (" over tcp", " over ibverbs") as our agent answered at setup, or
// ", backend unknown yet"; nothing from an agent older than asks.
func (r *route) Via() string {
	return fmt.Sprintf("via host agent (slot %d at agent %s)%s", r.via, r.far, r.over)
}

func (r *route) Post(wr *backend.WorkRequest) error { return r.post(wr, true) }

// SlowCompletions implements backend.SlowCompleter: an operation relayed
// by two agents takes 200 µs and more, so queue pairs on the route park
// their waits at once rather than spin (which cost the process about 30%
// of a CPU).
func (r *route) SlowCompletions() bool { return true }

// post posts wr; with flush, its record is sent before post returns (or
// is being sent by another goroutine), else it waits in the batch.
func (r *route) post(wr *backend.WorkRequest, flush bool) error {
	if err := r.Err(); err != nil {
		return err
	}
	p, err := r.record(wr)
	if err != nil {
		return err
	}
	if err := r.acquire(wr); err != nil {
		return err
	}
	x, err := r.a.b.newBounce(wr, &p)
	if err == nil {
		err = r.a.post(r, wr, &p, x, flush)
	}
	if err != nil {
		if x != nil {
			r.a.b.dropBounce(x)
		}
		<-r.room
		return err
	}
	return nil
}

// PostList posts wrs in order (backend.ListPoster) and sends their records
// together: one packet for as many as fit.
func (r *route) PostList(wrs []*backend.WorkRequest) (int, error) {
	defer r.a.flush()
	for i, wr := range wrs {
		if err := r.post(wr, false); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// acquire waits for room in flight, under wr's Cancel and Deadline.
func (r *route) acquire(wr *backend.WorkRequest) error {
	select {
	case r.room <- struct{}{}:
		return nil
	default:
	}
	r.a.flush() // a chain's records wait in the batch: send them first
	var timeout <-chan time.Time
	if !wr.Deadline.IsZero() {
		t := time.NewTimer(time.Until(wr.Deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case r.room <- struct{}{}:
		return nil
	case <-wr.Cancel:
		return fmt.Errorf("agent: waiting for room in flight: %w", context.Canceled)
	case <-timeout:
		return fmt.Errorf("agent: waiting for room in flight: %w", rdmamgr.ErrDeadline)
	case <-r.done:
		return r.Err()
	}
}

// forgetLocked drops wr from the route's in flight; finish follows.
// Called with a.mu held.
func (r *route) forgetLocked(wr *backend.WorkRequest) {
	delete(r.ids, wr)
	r.finishing++
}

// idleLocked closes idle once the route is closed and every request's
// completion was delivered. Called with a.mu held.
func (r *route) idleLocked() {
	if r.closed && len(r.ids) == 0 && r.finishing == 0 && !r.idleSet {
		r.idleSet = true
		close(r.idle)
	}
}

// finish completes wr (it is no longer in flight) with err, after its
// bounce region, if any, is done with.
func (r *route) finish(wr *backend.WorkRequest, x *bounce, err error) {
	if x != nil {
		r.a.b.finishBounce(x, wr, err == nil)
	}
	r.ops.Add(1)
	if err != nil {
		r.errs.Add(1)
	} else {
		switch wr.Op {
		case backend.OpWrite, backend.OpWriteImm, backend.OpSend:
			r.put.Add(uint64(len(wr.Local)))
		case backend.OpRead:
			r.got.Add(uint64(len(wr.Local)))
		}
	}
	<-r.room
	wr.Done.Complete(wr, err)
	r.a.mu.Lock()
	r.finishing--
	r.idleLocked()
	r.a.mu.Unlock()
}

// fail ends the route with err (once): Post refuses from now on; what is
// in flight completes as the agent answers it.
func (r *route) fail(err error) {
	r.failOnce.Do(func() {
		r.err.Store(&err)
		close(r.done)
	})
}

func (r *route) Cancel(wr *backend.WorkRequest) {
	a := r.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if wrid, ok := r.ids[wr]; ok {
		a.cancelLocked(wrid, a.ops[wrid])
	}
}

func (r *route) Done() <-chan struct{} { return r.done }

func (r *route) Err() error {
	if p := r.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *route) Stats() backend.RouteStats {
	r.a.mu.Lock()
	n := len(r.ids)
	r.a.mu.Unlock()
	return backend.RouteStats{Ops: r.ops.Load(), BytesPut: r.put.Load(), BytesGot: r.got.Load(), Errors: r.errs.Load(), InFlight: n}
}

// Close cancels what is in flight (its outcome: ErrClosed, unless it
// completed first) and waits until the agent answered all of it, the
// agent went, or CloseTimeout passed (then the rest completes when the
// agent answers or goes). Idempotent.
func (r *route) Close() error {
	r.fail(fmt.Errorf("agent: route closed: %w", rdmamgr.ErrClosed))
	a := r.a
	a.mu.Lock()
	if !r.closed {
		r.closed = true
		delete(a.routes, r)
		ids := make([]uint64, 0, len(r.ids))
		for wr, wrid := range r.ids {
			wr.RequestCancel(fmt.Errorf("agent: route closed: %w", rdmamgr.ErrClosed))
			ids = append(ids, wrid)
		}
		for _, wrid := range ids { // cancelLocked may wait (a.mu released)
			if op := a.ops[wrid]; op != nil {
				a.cancelLocked(wrid, op)
			}
		}
		r.idleLocked()
	}
	a.mu.Unlock()
	t := time.NewTimer(r.closeTimeout)
	defer t.Stop()
	select {
	case <-r.idle:
	case <-a.done:
	case <-t.C:
	}
	return nil
}
