package queuepair

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/coarseclock"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	"github.com/rdmamgr/rdmamgr/internal/refgate"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
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
	reg     *memreg.Registry // local, when it is one: resolved without copying the handle
	timeout time.Duration
	onRel   func()
	kind    backend.Kind
	obs     qpbind.Observer
	relOnce sync.Once
	cq      atomic.Pointer[CompletionQueue] // where operations posted now report
	fence   atomic.Pointer[signalFence]     // made by the first unsignaled post (fence.go)
	list    backend.ListPoster              // route's chain posting; nil: a loop of Post
	// inl: the route copies a chain's runs of small Puts and Gets in the
	// poster's goroutine (runInline), each at most inlMax bytes.
	inl    qpbind.InlineRunner
	inlMax int
	// slow: the route's operations take long (backend.SlowCompleter):
	// waits for them park at once, never spin.
	slow bool
	// drv: the route lets a waiter read its own answer (backend.Driver):
	// single operations without a completion queue are posted Waited.
	drv backend.Driver
	// near is the local region an operation was last posted from: the
	// next one from it is resolved without the registry's lookup.
	near atomic.Pointer[memreg.Region]
	// devLocal: the route moves device locals itself (DeviceLocalRoute);
	// else they are staged (stage).
	devLocal bool
	stage    stageSet

	// ops counts the operations armed and not yet completed, and is closed
	// by Release, which waits for it to drain. Lock-free: it is on the data
	// path.
	ops refgate.Gate
}

func init() {
	wiring.NewQueuePair = func(id, peerID uint64, route backend.Route, local qpbind.Resolver, opt qpbind.Options) any {
		return newQueuePair(id, peerID, route, local, opt)
	}
}

// newQueuePair binds a QueuePair to route; it does no I/O. It is the
// manager's (internal/wiring.NewQueuePair): programs get queue pairs from
// actor.Client.RequestQueuePair.
func newQueuePair(id, peerID uint64, route backend.Route, local qpbind.Resolver, opt qpbind.Options) *QueuePair {
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	q := &QueuePair{id: id, peerID: peerID, route: route, local: local, timeout: opt.Timeout, onRel: opt.OnRelease, kind: opt.Kind,
		obs: opt.Observer}
	q.list, _ = route.(backend.ListPoster)
	if q.inl, _ = route.(qpbind.InlineRunner); q.inl != nil {
		q.inlMax = q.inl.InlineMax()
	}
	if s, ok := route.(backend.SlowCompleter); ok {
		q.slow = s.SlowCompletions()
	}
	q.drv, _ = route.(backend.Driver)
	if d, ok := route.(DeviceLocalRoute); ok {
		q.devLocal = d.TakesDeviceLocal()
	}
	q.reg, _ = local.(*memreg.Registry)
	coarseclock.Acquire() // deadlines; Release gives it back
	return q
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

// Put copies local into remote (RDMA WRITE). It returns once the
// operation is posted: at once, unless the route is at its in-flight
// limit; then it waits for room until ctx ends, and the operation
// completes with ctx's error, nothing sent (doc.go, "Posting"). ctx bounds
// only the post: Wait(ctx) or Cancel end a posted operation early.
func (q *QueuePair) Put(ctx context.Context, local, remote buffer.Buffer) *WorkRequest {
	return q.newOp(ctx, backend.OpWrite, &local, &remote, operands{})
}

// Get copies remote into local (RDMA READ). It returns once the operation
// is posted, waiting for room in flight under ctx as Put does.
func (q *QueuePair) Get(ctx context.Context, local, remote buffer.Buffer) *WorkRequest {
	return q.newOp(ctx, backend.OpRead, &local, &remote, operands{})
}

// PostPut is Put into a caller-owned WorkRequest, which may be reused once
// it completed: the steady-state data path then allocates nothing. w must
// not be pending (it panics if it is).
func (q *QueuePair) PostPut(ctx context.Context, w *WorkRequest, local, remote buffer.Buffer) {
	if c := postCtx(ctx); !q.armOne(w, backend.OpWrite, &local, &remote, c, 0, false) {
		q.arm(w, backend.OpWrite, &local, &remote, q.deadline(), c, operands{})
	}
}

// PostGet is Get into a caller-owned, reusable WorkRequest (see PostPut).
func (q *QueuePair) PostGet(ctx context.Context, w *WorkRequest, local, remote buffer.Buffer) {
	if c := postCtx(ctx); !q.armOne(w, backend.OpRead, &local, &remote, c, 0, false) {
		q.arm(w, backend.OpRead, &local, &remote, q.deadline(), c, operands{})
	}
}

func (q *QueuePair) newOp(ctx context.Context, op backend.Op, local, remote *buffer.Buffer, opd operands) *WorkRequest {
	w := new(WorkRequest)
	q.arm(w, op, local, remote, q.deadline(), postCtx(ctx), opd)
	return w
}

// deadline is the deadline of an operation posted now, from the coarse
// clock: no clock read per operation, a few milliseconds of slack
// (internal/coarseclock).
func (q *QueuePair) deadline() time.Time { return coarseclock.Deadline(q.timeout) }

// postCtx is a poster's ctx as arm takes it: nil when it never ends, so
// the backend has no channel to watch.
func postCtx(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return nil
	}
	return ctx
}

// arm posts op on w; ctx, when not nil, is the poster's context: it ends
// Post's wait for room in flight (Submit cancels posted work through it).
// Every path ends in w.finish or in a Post that will complete w.
func (q *QueuePair) arm(w *WorkRequest, op backend.Op, local, remote *buffer.Buffer, deadline time.Time, ctx context.Context, opd operands) {
	if q.prepare(w, op, local, remote, deadline, ctx, &opd, nil) {
		// Waited: a Wait may read its answer (backend.Driver); not where
		// a kept Done channel (wantDone) observes it instead.
		w.wr.Waited = q.drv != nil && w.cq == nil && w.batch == nil && !w.staged.Load() && w.want.Load()&wantDone == 0
		q.post(w, ctx)
	}
}

// chainPrep is what PostOps takes for a whole chain at once: slots of
// its completion queue and entries into q.ops (an atomic operation each,
// not one per operation), and the local region last resolved.
type chainPrep struct {
	cq      *CompletionQueue
	slots   int64 // reserved in cq, not yet given to an operation
	fast    int64 // of slots, those counted in cq.fast already (q not slow)
	entries int64 // entered into q.ops, not yet given to an operation
	left    int64 // operations of the chain still to prepare, this one included
	local   memreg.LocalRun
}

// giveBack returns what ch took and no operation used.
func (ch *chainPrep) giveBack(q *QueuePair) {
	if ch.cq != nil {
		if ch.fast > 0 {
			ch.cq.fast.Add(-ch.fast)
		}
		ch.cq.unreserve(ch.slots)
	}
	if ch.entries > 0 {
		q.ops.LeaveN(ch.entries)
	}
	ch.slots, ch.fast, ch.entries = 0, 0, 0
	ch.local.Close()
}

// prepare arms w for op up to its post: it reports whether w is ready to
// post, or was finished (refused) already. ch, when not nil, is the
// chain's: w takes its slot and entry from it.
func (q *QueuePair) prepare(w *WorkRequest, op backend.Op, local, remote *buffer.Buffer, deadline time.Time, ctx context.Context, opd *operands, ch *chainPrep) bool {
	// Checked before w is touched (reported below, in its turn): the
	// handles are read while nothing waits on them, and are in cache when
	// reset copies the remote one after its atomic operation.
	var checkErr error
	if !q.plainOK(op, local, remote) {
		checkErr = q.check(op, local, remote)
	}
	w.reset(op, remote, deadline, ctx)
	w.wr.Imm, w.wr.HasImm, w.wr.Compare, w.wr.Swap = opd.imm, opd.hasImm, opd.compare, opd.swap
	w.id = opd.id
	var cq *CompletionQueue
	if ch != nil {
		cq = ch.cq
	} else {
		cq = q.cq.Load()
	}
	if cq != nil { // first: every refusal below is reported through cq
		if ch != nil && ch.slots > 0 {
			ch.slots--
		} else if !cq.reserve() { // reported here, not through the full cq
			w.finish(fmt.Errorf("%s: completion queue of %d full: %w", op, len(cq.ring), rdmamgr.ErrLimit))
			return false
		}
		w.cq = cq                     // a slot is w's until the cq's Poll hands it over
		if w.fast = !q.slow; w.fast { // a Wait spins while such slots are held
			if ch != nil && ch.fast > 0 {
				ch.fast-- // counted with the chain's slots
			} else {
				cq.fast.Add(1)
			}
		}
		if w.batch == nil { // a batch's operations are signaled, and vouch for nothing
			q.enlist(w, opd.unsig)
		} else {
			w.unsig, w.fenced = false, false
		}
	}
	if ch != nil && ch.entries > 0 {
		ch.entries--
	} else if !q.ops.Enter() {
		w.finish(rdmamgr.ErrReleased)
		return false
	}
	w.qp = q // counted in q.ops until finish
	if q.obs != nil {
		w.start = time.Now()
	}
	if checkErr != nil {
		w.finish(checkErr)
		return false
	}
	if ctx != nil && ctx.Err() != nil { // ended before it was posted
		w.finish(fmt.Errorf("%s: %w", op, ctxCause(ctx)))
		return false
	}
	if op.Atomic() { // no local memory: the old value comes back in the work request
		return true
	}
	if local.Location != buffer.Host && q.reg != nil {
		return q.prepareDevice(w, op, local) // stage.go
	}
	// The reference goes straight into w.ref (released by finish, once
	// the outcome is reported): a Ref held in a local first was copied
	// twice more per operation, through stack temporaries.
	var err error
	if q.reg != nil && ch != nil {
		if mem, ok := ch.local.Next(local, &w.ref); ok { // the common case: a reference taken with the chain's
			// The region and bytes from the run, not from w.ref: Ref's
			// methods copy the Ref just written, which stalls on store
			// forwarding.
			w.wr.LocalRegion = ch.local.Last()
			w.wr.Local = mem
			return true
		} else {
			w.ref, err = ch.local.Acquire(local, ch.left)
		}
	} else if q.reg != nil {
		near := q.near.Load()
		lr := q.reg.NewLocalRun(near)
		if w.ref, err = lr.Acquire(local, 1); err == nil && w.ref.Region() != near {
			q.near.Store(w.ref.Region())
		}
	} else {
		w.ref, err = q.local.AcquireLocal(*local)
	}
	if err != nil {
		w.ref = memreg.Ref{} // none held: finish releases nothing
		if errors.Is(err, rdmamgr.ErrInvalid) {
			err = fmt.Errorf("%w: %w", rdmamgr.ErrNotLocal, err)
		}
		w.finish(fmt.Errorf("%s: %w", op, err))
		return false
	}
	w.wr.LocalRegion = w.ref.Region()
	w.wr.Local = w.ref.Bytes()
	return true
}

// post hands a prepared w to the route; ctx is w's poster's (nil: none).
func (q *QueuePair) post(w *WorkRequest, ctx context.Context) {
	if w.staged.Load() {
		q.stagePost(w, ctx)
		return
	}
	if !q.ready(w) {
		return
	}
	if err := q.route.Post(&w.wr); err != nil {
		q.postFailed(w, err, ctx)
	}
}

// ready readies a prepared w for the route: false if a cancel came first
// (w is finished).
func (q *QueuePair) ready(w *WorkRequest) bool {
	if cause := w.wr.CancelCause(); cause != nil {
		w.finish(fmt.Errorf("%s %d bytes: %w", w.wr.Op, w.size(), cause))
		return false
	}
	if w.owner.Load() != q {
		w.owner.Store(q) // before Post: a cancel may come as soon as it is posted
	}
	return true
}

// postFailed finishes w, which the route refused with err.
func (q *QueuePair) postFailed(w *WorkRequest, err error, ctx context.Context) {
	if cause := w.wr.CancelCause(); cause != nil {
		err = cause
	} else if ctx != nil && ctx.Err() != nil {
		err = ctxCause(ctx)
	}
	w.finish(fmt.Errorf("%s %d bytes: %w", w.wr.Op, w.size(), err))
}

// plainOK is check's common case, inlined: a Put or Get that passes.
// False says only that check must look (and say why).
func (q *QueuePair) plainOK(op backend.Op, local, remote *buffer.Buffer) bool {
	return (op == backend.OpWrite && remote.Access&buffer.AccessWrite != 0 || op == backend.OpRead && remote.Access&buffer.AccessRead != 0) &&
		remote.OwnerID == q.peerID && local.Length == remote.Length && local.Length != 0 && remote.Offset+remote.Length >= remote.Offset
}

func (q *QueuePair) check(op backend.Op, local, remote *buffer.Buffer) error {
	switch {
	case op == backend.OpSend:
		if local.Length == 0 {
			return fmt.Errorf("%s of 0 bytes: %w", op, rdmamgr.ErrInvalid)
		}
		return nil
	case op.Atomic():
		if remote.OwnerID != q.peerID {
			return fmt.Errorf("%s on %v on route to %016x: %w", op, *remote, q.peerID, rdmamgr.ErrWrongPeer)
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
		return fmt.Errorf("%s to %v on route to %016x: %w", op, *remote, q.peerID, rdmamgr.ErrWrongPeer)
	}
	if local.Length != remote.Length {
		return fmt.Errorf("%s: local %d bytes, remote %d: %w", op, local.Length, remote.Length, rdmamgr.ErrLengthMismatch)
	}
	if local.Length == 0 {
		return fmt.Errorf("%s of 0 bytes: %w", op, rdmamgr.ErrInvalid)
	}
	if remote.Offset+remote.Length < remote.Offset {
		return fmt.Errorf("%s: remote %v: %w", op, *remote, rdmamgr.ErrOutOfRange)
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
		q.stage.close()   // its workers: every staged operation finished
		q.near.Store(nil) // keeps no released region's memory from the collector
		coarseclock.Release()
		if q.onRel != nil {
			q.onRel()
		}
	})
}
