package queuepair

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Resolver resolves a local handle to memory and takes a reference on its
// region; *buffer.Registry implements it.
type Resolver interface {
	OwnerID() uint64
	Local(b buffer.Buffer) (*buffer.Region, []byte, error)
}

// Options of a QueuePair.
type Options struct {
	// Timeout is the deadline of an operation posted without one.
	Timeout time.Duration
	// Kind names the route's backend.
	Kind backend.Kind
	// OnRelease is called once by Release, after every operation posted
	// before it completed (the manager drops its reference on the route).
	OnRelease func()
	// Observer, when not nil, sees every operation's outcome.
	Observer Observer
}

// DefaultTimeout is the operation timeout when Options.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// QueuePair is a handle bound to one route to one peer manager.
type QueuePair struct {
	id      uint64
	peerID  uint64
	route   backend.Route
	local   Resolver
	timeout time.Duration
	onRel   func()
	kind    backend.Kind
	obs     Observer
	relOnce sync.Once

	// ops holds the number of operations armed and not yet completed in
	// its low bits, and releasedBit once Release started. Lock-free: it is
	// on the data path.
	ops      atomic.Int64
	idle     chan struct{} // closed once released and no operation is left
	idleOnce sync.Once
}

const releasedBit = int64(1) << 62

// New binds a QueuePair to route. It does no I/O.
func New(id, peerID uint64, route backend.Route, local Resolver, opt Options) *QueuePair {
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	return &QueuePair{id: id, peerID: peerID, route: route, local: local, timeout: opt.Timeout, onRel: opt.OnRelease, kind: opt.Kind,
		obs: opt.Observer, idle: make(chan struct{})}
}

// ID returns the queue pair's id at its manager.
func (q *QueuePair) ID() uint64 { return q.id }

// PeerID returns the id of the peer manager.
func (q *QueuePair) PeerID() uint64 { return q.peerID }

// Kind returns the backend kind of the queue pair's route.
func (q *QueuePair) Kind() backend.Kind { return q.kind }

// Route returns the backend route (for stats).
func (q *QueuePair) Route() backend.Route { return q.route }

// Put copies local into remote (RDMA WRITE). It returns at once.
func (q *QueuePair) Put(local, remote buffer.Buffer) *WorkRequest {
	return q.post(backend.OpWrite, local, remote, time.Now().Add(q.timeout))
}

// Get copies remote into local (RDMA READ). It returns at once.
func (q *QueuePair) Get(local, remote buffer.Buffer) *WorkRequest {
	return q.post(backend.OpRead, local, remote, time.Now().Add(q.timeout))
}

// Op is one operation of a batch.
type Op struct {
	Op     backend.Op // backend.OpWrite (Put) or backend.OpRead (Get)
	Local  buffer.Buffer
	Remote buffer.Buffer
}

// PutOp and GetOp build batch operations.
func PutOp(local, remote buffer.Buffer) Op {
	return Op{Op: backend.OpWrite, Local: local, Remote: remote}
}

// GetOp builds a Get for Submit.
func GetOp(local, remote buffer.Buffer) Op {
	return Op{Op: backend.OpRead, Local: local, Remote: remote}
}

// Submit posts ops that share ctx: its deadline (or the queue pair's
// timeout from now, whichever is earlier) and its cancellation. When ctx
// ends before an operation completed, the operation is cancelled: it
// completes with ctx's error (see WorkRequest.Wait), without anybody having
// to wait for it. It returns at once.
func (q *QueuePair) Submit(ctx context.Context, ops ...Op) *Batch {
	dl := time.Now().Add(q.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	b := &Batch{wrs: make([]*WorkRequest, len(ops))}
	var c context.Context
	if ctx.Done() != nil {
		c = ctx
	}
	b.left.Store(int32(len(ops)))
	for i, o := range ops {
		b.wrs[i] = &WorkRequest{batch: b}
		q.arm(b.wrs[i], o.Op, o.Local, o.Remote, dl, c)
	}
	if c != nil {
		// Cancel what is still pending when ctx ends (at once if it has).
		stop := context.AfterFunc(ctx, func() {
			cause := ctxCause(ctx)
			for _, w := range b.wrs {
				w.cancel(cause)
			}
		})
		b.watch.Store(&stop)
		if done, _ := b.Poll(); done {
			stop()
		}
	}
	return b
}

// PostPut is Put into a caller-owned WorkRequest, which may be reused once
// it completed: the steady-state data path then allocates nothing. w must
// not be pending (it panics if it is).
func (q *QueuePair) PostPut(w *WorkRequest, local, remote buffer.Buffer) {
	q.arm(w, backend.OpWrite, local, remote, time.Now().Add(q.timeout), nil)
}

// PostGet is Get into a caller-owned, reusable WorkRequest (see PostPut).
func (q *QueuePair) PostGet(w *WorkRequest, local, remote buffer.Buffer) {
	q.arm(w, backend.OpRead, local, remote, time.Now().Add(q.timeout), nil)
}

func (q *QueuePair) post(op backend.Op, local, remote buffer.Buffer, deadline time.Time) *WorkRequest {
	w := new(WorkRequest)
	q.arm(w, op, local, remote, deadline, nil)
	return w
}

// arm posts op on w; ctx, when not nil, is the poster's context: it ends
// Post's wait for room in flight (Submit cancels posted work through it).
func (q *QueuePair) arm(w *WorkRequest, op backend.Op, local, remote buffer.Buffer, deadline time.Time, ctx context.Context) {
	if !w.state.CompareAndSwap(stateIdle, statePending) && !w.state.CompareAndSwap(stateDone, statePending) {
		panic("queuepair: WorkRequest reused while pending")
	}
	if w.sig == nil {
		w.sig = make(chan struct{}, 1)
	}
	select {
	case <-w.sig: // a token nobody consumed
	default:
	}
	w.err = nil
	w.wr.Reset()
	w.wr.Op = op
	w.wr.Remote = remote
	w.wr.Deadline = deadline
	w.wr.Done = w
	if ctx != nil {
		w.wr.Cancel = ctx.Done()
	}
	if !q.begin() {
		w.finish(ErrReleased)
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
	region, mem, err := q.local.Local(local)
	if err != nil {
		if errors.Is(err, buffer.ErrInvalid) {
			err = fmt.Errorf("%w: %w", ErrNotLocal, err)
		}
		w.finish(fmt.Errorf("%s: %w", op, err))
		return
	}
	w.region = region
	w.wr.LocalRegion = region
	w.wr.Local = mem
	if cause := w.wr.CancelCause(); cause != nil {
		w.finish(fmt.Errorf("%s %d bytes: %w", op, len(mem), cause))
		return
	}
	w.owner.Store(q) // before Post: a cancel may come as soon as it is posted
	if err := q.route.Post(&w.wr); err != nil {
		if cause := w.wr.CancelCause(); cause != nil {
			err = cause
		} else if ctx != nil && ctx.Err() != nil {
			err = ctxCause(ctx)
		}
		w.finish(fmt.Errorf("%s %d bytes: %w", op, len(mem), err))
	}
}

// begin counts an operation in, unless the queue pair is released.
func (q *QueuePair) begin() bool {
	for {
		s := q.ops.Load()
		if s&releasedBit != 0 {
			return false
		}
		if q.ops.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// end counts a completed operation out; the last one after Release wakes it.
func (q *QueuePair) end() {
	if q.ops.Add(-1) == releasedBit {
		q.idleOnce.Do(func() { close(q.idle) })
	}
}

func (q *QueuePair) check(op backend.Op, local, remote buffer.Buffer) error {
	if remote.OwnerID != q.peerID {
		return fmt.Errorf("%s to %v on route to %016x: %w", op, remote, q.peerID, ErrWrongPeer)
	}
	if local.Length != remote.Length {
		return fmt.Errorf("%s: local %d bytes, remote %d: %w", op, local.Length, remote.Length, ErrLengthMismatch)
	}
	if local.Length == 0 {
		return fmt.Errorf("%s of 0 bytes: %w", op, buffer.ErrInvalid)
	}
	if remote.Offset+remote.Length < remote.Offset {
		return fmt.Errorf("%s: remote %v: %w", op, remote, buffer.ErrOutOfRange)
	}
	if !remote.Access.Allows(op.Need()) {
		return fmt.Errorf("%s to %s buffer: %w", op, remote.Access, buffer.ErrAccess)
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
		if q.ops.Or(releasedBit) == 0 {
			q.idleOnce.Do(func() { close(q.idle) })
		}
		<-q.idle
		if q.onRel != nil {
			q.onRel()
		}
	})
}

// WorkRequest is the handle of one posted operation. Put and Get return a
// new one; PostPut and PostGet reuse one the caller owns.
type WorkRequest struct {
	wr     backend.WorkRequest
	region *buffer.Region
	qp     *QueuePair // set while the operation counts in qp.ops
	// owner is the queue pair w was last posted on: where a cancel goes.
	// Atomic: a batch's context watcher reads it while the backend runs.
	owner atomic.Pointer[QueuePair]
	batch *Batch        // set once by Submit: its watcher stops with the last op
	sig   chan struct{} // capacity 1: one token per completion
	err   error         // written before state becomes done
	state atomic.Uint32
	start time.Time // when it was posted, for the queue pair's Observer
}

const (
	stateIdle uint32 = iota
	statePending
	stateDone
)

// Complete implements backend.Completer.
func (w *WorkRequest) Complete(_ *backend.WorkRequest, err error) { w.finish(err) }

func (w *WorkRequest) finish(err error) {
	if w.state.Load() != statePending {
		return
	}
	w.qp.observe(w, err) // first: it adds nothing between the unref and done below
	w.start = time.Time{}
	r := w.region
	w.region = nil
	q := w.qp // read before done: the owner may re-arm w right after
	w.qp = nil
	w.err = err
	w.state.Store(stateDone)
	select {
	case w.sig <- struct{}{}:
	default:
	}
	// The local region is let go only once the outcome is reported: whoever
	// waits for its references (Release) then finds the operation done.
	if r != nil {
		r.Unref()
	}
	if b := w.batch; b != nil && b.left.Add(-1) == 0 {
		b.unwatch()
	}
	if q != nil {
		q.end()
	}
}

// cancel asks the backend to end w early with cause; it returns at once
// and w completes (promptly) once the backend can no longer touch its
// memory. A no-op once w completed.
func (w *WorkRequest) cancel(cause error) {
	if w.state.Load() != statePending || !w.wr.RequestCancel(cause) {
		return
	}
	// The cause is set first, so a Post still running sees it (backends
	// check it as they queue); a Cancel that arrives after completion is
	// ignored by the route.
	if q := w.owner.Load(); q != nil {
		q.route.Cancel(&w.wr)
	}
}

// Done returns a channel that receives a value when the operation
// completes (one value per completion: use either Done or Wait, not both).
func (w *WorkRequest) Done() <-chan struct{} { return w.sig }

// Poll reports whether the operation completed, and its error if so.
func (w *WorkRequest) Poll() (bool, error) {
	if w.state.Load() == stateDone {
		return true, w.err
	}
	return false, nil
}

// Err returns the outcome; nil while pending.
func (w *WorkRequest) Err() error {
	_, err := w.Poll()
	return err
}

// Wait blocks until the operation completes and returns its outcome. When
// ctx ends first, Wait cancels the operation and returns once the backend
// can no longer touch the local memory: the error is then ctx's (see the
// package doc for errors.Is), unless the operation completed first. Either
// way, when Wait returns the memory is the caller's again, and Err returns
// the same outcome.
func (w *WorkRequest) Wait(ctx context.Context) error {
	if w.state.Load() == stateDone {
		return w.err
	}
	select {
	case <-w.sig:
		return w.err
	case <-ctx.Done():
	}
	w.cancel(ctxCause(ctx))
	<-w.sig
	return w.err
}

// Cancel ends the operation early with context.Canceled, waits until the
// backend can no longer touch its local memory and returns its outcome
// (nil if it completed first). Use either Cancel or Wait, not both.
func (w *WorkRequest) Cancel() error {
	if w.state.Load() == stateDone {
		return w.err
	}
	w.cancel(fmt.Errorf("queuepair: %w", context.Canceled))
	<-w.sig
	return w.err
}

// ctxCause is the error an operation ended by ctx reports: for a deadline
// backend.ErrDeadline (which matches context.DeadlineExceeded too), for a
// cancellation context.Canceled and ctx's cause if one was given.
func ctxCause(ctx context.Context) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("queuepair: context deadline: %w", backend.ErrDeadline)
	}
	if c := context.Cause(ctx); c != nil && c != err {
		return fmt.Errorf("queuepair: %w: %w", err, c)
	}
	return fmt.Errorf("queuepair: %w", err)
}

// Batch is a set of operations posted together.
type Batch struct {
	wrs   []*WorkRequest
	left  atomic.Int32                // operations not yet completed
	watch atomic.Pointer[func() bool] // stops Submit's ctx watcher
}

// Requests returns the batch's work requests in submission order.
func (b *Batch) Requests() []*WorkRequest { return b.wrs }

// Wait waits for every operation and returns their errors joined. When ctx
// ends first, the operations still pending are cancelled and Wait returns
// once none of them can touch local memory (see WorkRequest.Wait).
func (b *Batch) Wait(ctx context.Context) error {
	var errs []error
	for i, w := range b.wrs {
		if w.state.Load() != stateDone && ctx.Err() != nil {
			cause := ctxCause(ctx)
			for _, rest := range b.wrs[i:] {
				rest.cancel(cause)
			}
		}
		if err := w.Wait(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	b.unwatch()
	return errors.Join(errs...)
}

// unwatch stops Submit's ctx watcher once every operation completed.
func (b *Batch) unwatch() {
	if stop := b.watch.Load(); stop != nil {
		(*stop)()
	}
}

// Cancel cancels every pending operation of the batch, waits until none can
// touch local memory and returns their errors joined.
func (b *Batch) Cancel() error {
	cause := fmt.Errorf("queuepair: %w", context.Canceled)
	for _, w := range b.wrs {
		w.cancel(cause)
	}
	var errs []error
	for _, w := range b.wrs {
		if err := w.Cancel(); err != nil {
			errs = append(errs, err)
		}
	}
	b.unwatch()
	return errors.Join(errs...)
}

// Poll reports whether every operation completed, and their joined errors.
func (b *Batch) Poll() (bool, error) {
	var errs []error
	for _, w := range b.wrs {
		done, err := w.Poll()
		if !done {
			return false, nil
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return true, errors.Join(errs...)
}
