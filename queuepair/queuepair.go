package queuepair

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	"github.com/rdmamgr/rdmamgr/internal/refgate"
)

// DefaultTimeout is an operation's deadline when the manager sets none
// (actor.Config.OpTimeout).
const DefaultTimeout = 30 * time.Second

// QueuePair is a handle bound to one route to one peer manager. Get one
// from actor.Client.RequestQueuePair; give it back with Release.
type QueuePair struct {
	id      uint64
	peerID  uint64
	route   backend.Route
	local   qpbind.Resolver
	timeout time.Duration
	onRel   func()
	kind    backend.Kind
	obs     qpbind.Observer
	relOnce sync.Once

	// ops counts the operations armed and not yet completed, and is closed
	// by Release, which waits for it to drain. Lock-free: it is on the data
	// path.
	ops refgate.Gate
}

// New binds a QueuePair to route; it does no I/O. It is the manager's
// (its Resolver and Options are internal to this module): programs get
// queue pairs from actor.Client.RequestQueuePair.
func New(id, peerID uint64, route backend.Route, local qpbind.Resolver, opt qpbind.Options) *QueuePair {
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	return &QueuePair{id: id, peerID: peerID, route: route, local: local, timeout: opt.Timeout, onRel: opt.OnRelease, kind: opt.Kind,
		obs: opt.Observer}
}

// ID returns the queue pair's id at its manager.
func (q *QueuePair) ID() uint64 { return q.id }

// PeerID returns the id of the peer manager.
func (q *QueuePair) PeerID() uint64 { return q.peerID }

// Kind returns the backend kind of the queue pair's route.
func (q *QueuePair) Kind() backend.Kind { return q.kind }

// Route is what a queue pair shows of the route it posts on, which it
// shares with the other queue pairs to the same peer (so two queue pairs
// on one route return equal Routes): whether it is up, why it ended, its
// counters. A route that ended (Err is rdmamgr.ErrPeerGone, say) fails
// every operation on it: request a new queue pair, which gets a new route.
type Route interface {
	// Done is closed when the route has failed or was closed.
	Done() <-chan struct{}
	// Err returns why the route ended (nil while it is up).
	Err() error
	// Stats returns the route's counters.
	Stats() backend.RouteStats
}

// Route returns the route the queue pair posts on.
func (q *QueuePair) Route() Route { return q.route }

// Put copies local into remote (RDMA WRITE). It returns at once.
func (q *QueuePair) Put(local, remote buffer.Buffer) *WorkRequest {
	return q.newOp(backend.OpWrite, local, remote, time.Now().Add(q.timeout))
}

// Get copies remote into local (RDMA READ). It returns at once.
func (q *QueuePair) Get(local, remote buffer.Buffer) *WorkRequest {
	return q.newOp(backend.OpRead, local, remote, time.Now().Add(q.timeout))
}

// PostPut is Put into a caller-owned WorkRequest, which may be reused once
// it completed: the steady-state data path then allocates nothing. w must
// not be pending (it panics if it is).
func (q *QueuePair) PostPut(w *WorkRequest, local, remote buffer.Buffer) {
	q.arm(w, backend.OpWrite, local, remote, time.Now().Add(q.timeout), nil, operands{})
}

// PostGet is Get into a caller-owned, reusable WorkRequest (see PostPut).
func (q *QueuePair) PostGet(w *WorkRequest, local, remote buffer.Buffer) {
	q.arm(w, backend.OpRead, local, remote, time.Now().Add(q.timeout), nil, operands{})
}

func (q *QueuePair) newOp(op backend.Op, local, remote buffer.Buffer, deadline time.Time) *WorkRequest {
	w := new(WorkRequest)
	q.arm(w, op, local, remote, deadline, nil, operands{})
	return w
}

// arm posts op on w; ctx, when not nil, is the poster's context: it ends
// Post's wait for room in flight (Submit cancels posted work through it).
// Every path ends in w.finish or in a Post that will complete w.
func (q *QueuePair) arm(w *WorkRequest, op backend.Op, local, remote buffer.Buffer, deadline time.Time, ctx context.Context, opd operands) {
	w.reset(op, remote, deadline, ctx)
	w.wr.Imm, w.wr.HasImm, w.wr.Compare, w.wr.Swap = opd.imm, opd.hasImm, opd.compare, opd.swap
	if !q.ops.Enter() {
		w.finish(rdmamgr.ErrReleased)
		return
	}
	w.qp = q // counted in q.ops until finish
	if q.obs != nil {
		w.start = time.Now()
	}
	if err := q.check(op, local, remote); err != nil {
		w.finish(err)
		return
	}
	if ctx != nil && ctx.Err() != nil { // ended before it was posted
		w.finish(fmt.Errorf("%s: %w", op, ctxCause(ctx)))
		return
	}
	if op.Atomic() { // no local memory: the old value comes back in the work request
		q.post(w, op, 8, ctx)
		return
	}
	ref, err := q.local.AcquireLocal(local)
	if err != nil {
		if errors.Is(err, rdmamgr.ErrInvalid) {
			err = fmt.Errorf("%w: %w", rdmamgr.ErrNotLocal, err)
		}
		w.finish(fmt.Errorf("%s: %w", op, err))
		return
	}
	w.ref = ref // released by finish, once the outcome is reported
	mem := ref.Bytes()
	w.wr.LocalRegion = ref.Region()
	w.wr.Local = mem
	q.post(w, op, len(mem), ctx)
}

// post hands an armed w to the route; ctx is w's poster's (nil: none).
func (q *QueuePair) post(w *WorkRequest, op backend.Op, n int, ctx context.Context) {
	if cause := w.wr.CancelCause(); cause != nil {
		w.finish(fmt.Errorf("%s %d bytes: %w", op, n, cause))
		return
	}
	w.owner.Store(q) // before Post: a cancel may come as soon as it is posted
	if err := q.route.Post(&w.wr); err != nil {
		if cause := w.wr.CancelCause(); cause != nil {
			err = cause
		} else if ctx != nil && ctx.Err() != nil {
			err = ctxCause(ctx)
		}
		w.finish(fmt.Errorf("%s %d bytes: %w", op, n, err))
	}
}

func (q *QueuePair) check(op backend.Op, local, remote buffer.Buffer) error {
	switch {
	case op == backend.OpSend:
		if local.Length == 0 {
			return fmt.Errorf("%s of 0 bytes: %w", op, rdmamgr.ErrInvalid)
		}
		return nil
	case op.Atomic():
		if remote.OwnerID != q.peerID {
			return fmt.Errorf("%s on %v on route to %016x: %w", op, remote, q.peerID, rdmamgr.ErrWrongPeer)
		}
		if remote.Length != 8 || remote.Offset%8 != 0 {
			return fmt.Errorf("%s on %d bytes at offset %d (want one 8-byte aligned word): %w", op, remote.Length, remote.Offset, rdmamgr.ErrMisaligned)
		}
		if !remote.Access.Allows(op.Need()) {
			return fmt.Errorf("%s on a %s buffer: %w", op, remote.Access, rdmamgr.ErrAccess)
		}
		return nil
	}
	if remote.OwnerID != q.peerID {
		return fmt.Errorf("%s to %v on route to %016x: %w", op, remote, q.peerID, rdmamgr.ErrWrongPeer)
	}
	if local.Length != remote.Length {
		return fmt.Errorf("%s: local %d bytes, remote %d: %w", op, local.Length, remote.Length, rdmamgr.ErrLengthMismatch)
	}
	if local.Length == 0 {
		return fmt.Errorf("%s of 0 bytes: %w", op, rdmamgr.ErrInvalid)
	}
	if remote.Offset+remote.Length < remote.Offset {
		return fmt.Errorf("%s: remote %v: %w", op, remote, rdmamgr.ErrOutOfRange)
	}
	if !remote.Access.Allows(op.Need()) {
		return fmt.Errorf("%s to %s buffer: %w", op, remote.Access, rdmamgr.ErrAccess)
	}
	return nil
}

// Release gives the queue pair back to its manager; later operations fail
// with ErrReleased. Operations already posted complete normally: Release
// waits until they have (each is bounded by its deadline) before it gives
// the queue pair back, because that may close the route. Idempotent; every
// call returns once the queue pair is given back.
func (q *QueuePair) Release() {
	q.relOnce.Do(func() {
		q.ops.Close()
		<-q.ops.Drained()
		if q.onRel != nil {
			q.onRel()
		}
	})
}
