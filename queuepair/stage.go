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
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// DeviceLocalRoute is implemented by a route (backend.Route) whose
// backend moves a device local itself (shm through CUDA IPC): when
// TakesDeviceLocal is true, a Put from or a Get into the caller's own
// device memory is posted to it as is, with WorkRequest.Local nil and
// LocalRegion a *memreg.DeviceSpan (the memory, valid until the request
// completes). Every other route gets such an operation staged by the
// queue pair (stage.go): read once when the queue pair is bound.
type DeviceLocalRoute interface {
	TakesDeviceLocal() bool
}

// Staging of device locals on routes that move host memory only: the
// queue pair runs a Put from (Get into) a device region as a pipeline of
// inner host operations through stageDepth pinned staging buffers. A Put
// copies the next chunks from the device while the inner Puts of the
// chunks before them are in flight; a Get copies chunk k to the device
// while the inner Gets of the chunks after it are in flight, so up to
// stageDepth chunks of an operation are on the wire at once (the route's
// round trip, not the copies, bounds a shallow pipeline). Each queue pair
// has stageWorkers workers (goroutines, made on its first staged operation
// and ended by Release), each with its own buffers (host regions of the
// local registry, pinned with HostRegister, so every backend can post from
// them) and streams: at most stageWorkers × stageDepth × stageChunk
// (4 MiB) of pinned memory per queue pair that staged anything. Staged
// operations wait in a queue of stageQueue for a free worker
// (back-pressure as at the route's in-flight limit).
const (
	stageWorkers = 2
	stageQueue   = 64
)

// stageChunk is the size of one staging buffer, and stageDepth the
// buffers of a worker (a test may change them before the queue pair's
// first staged operation). The workers page-lock their buffers
// themselves (bind); nothing else does (memreg.PinHost is shm's, for
// regions of 1 MiB or more).
var (
	stageChunk = uint64(cuda.StageChunk)
	stageDepth = 8
)

// stageSet is a queue pair's staging workers.
type stageSet struct {
	mu      sync.Mutex
	ops     chan *WorkRequest // made with the workers
	workers []*stageWorker
	ready   atomic.Bool // workers made (read by cancel)
	wg      sync.WaitGroup
	closed  bool
}

// stageWorker runs one staged operation at a time.
type stageWorker struct {
	q    *QueuePair
	kick chan struct{} // capacity 1: cur may have been cancelled
	// mu guards cur, the operation it runs (cancel's target), and stop,
	// closed by that operation's cancel: it ends an inner Post's wait for
	// room in flight (backend.WorkRequest.Cancel). A closed stop is
	// replaced at the next operation (an allocation after a cancel only).
	mu      sync.Mutex
	cur     *WorkRequest
	stop    chan struct{}
	stopped bool
	done    chan int    // capacity stageDepth: the slot whose inner op completed
	slots   []stageSlot // stageDepth of them
	d       cuda.Driver // what the slots are pinned and their streams made in
	ctx     cuda.Context
	err     error // the pipeline's first error
}

// stageSlot is one staging buffer, its stream and its inner operation.
type stageSlot struct {
	k      *stageWorker
	i      int
	buf    buffer.Buffer
	ref    memreg.Ref // held while an operation runs (hold)
	mem    []byte     // buf's memory, pinned
	pinned bool
	stream cuda.Stream
	inner  backend.WorkRequest
	busy   bool  // inner in flight (the worker's)
	res    error // inner's outcome, written before done says so
}

// Complete implements backend.Completer for the slot's inner operation.
func (s *stageSlot) Complete(_ *backend.WorkRequest, err error) {
	s.res = err
	s.k.done <- s.i
}

// prepareDevice is prepare's resolution of a local that says it is in
// device memory (local.Location): true when w is ready to post (staged or
// not), false when it was finished.
func (q *QueuePair) prepareDevice(w *WorkRequest, op backend.Op, local *buffer.Buffer) bool {
	ref, err := q.reg.AcquireLocalAny(local)
	if err != nil {
		if errors.Is(err, rdmamgr.ErrInvalid) {
			err = fmt.Errorf("%w: %w", rdmamgr.ErrNotLocal, err)
		}
		w.finish(fmt.Errorf("%s: %w", op, err))
		return false
	}
	w.ref = ref // released by finish
	span, ok := ref.Device()
	if !ok { // host memory after all
		w.wr.LocalRegion = ref.Region()
		w.wr.Local = ref.Bytes()
		return true
	}
	if op != backend.OpWrite && op != backend.OpRead {
		w.finish(fmt.Errorf("%s from device memory (only Put and Get are staged): %w", op, rdmamgr.ErrNotSupported))
		return false
	}
	if q.devLocal {
		w.dev = span
		w.wr.LocalRegion = &w.dev
		return true
	}
	w.staged.Store(true)
	return true
}

// stagePost hands a prepared staged w to a worker, waiting for room in
// the queue under ctx (nil: none) and w's deadline.
func (q *QueuePair) stagePost(w *WorkRequest, ctx context.Context) {
	if !q.ready(w) {
		return
	}
	s := &q.stage
	if !s.ready.Load() {
		if err := q.startStage(); err != nil {
			w.finish(fmt.Errorf("%s %d bytes: %w", w.wr.Op, w.size(), err))
			return
		}
	}
	select {
	case s.ops <- w:
		return
	default:
	}
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	t := time.NewTimer(time.Until(w.wr.Deadline))
	defer t.Stop()
	select {
	case s.ops <- w:
	case <-done:
		w.finish(fmt.Errorf("%s %d bytes: waiting for a staging buffer: %w", w.wr.Op, w.size(), ctxCause(ctx)))
	case <-t.C:
		w.finish(fmt.Errorf("%s %d bytes: waiting for a staging buffer: %w", w.wr.Op, w.size(), rdmamgr.ErrDeadline))
	}
}

// startStage makes the workers once.
func (q *QueuePair) startStage() error {
	s := &q.stage
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return rdmamgr.ErrReleased
	}
	if s.ready.Load() {
		return nil
	}
	s.ops = make(chan *WorkRequest, stageQueue)
	for range stageWorkers {
		k := &stageWorker{q: q, kick: make(chan struct{}, 1), done: make(chan int, stageDepth), stop: make(chan struct{}),
			slots: make([]stageSlot, stageDepth)}
		for i := range k.slots {
			k.slots[i].k, k.slots[i].i = k, i
		}
		s.workers = append(s.workers, k)
		s.wg.Add(1)
		go k.loop(s.ops, &s.wg)
	}
	s.ready.Store(true)
	return nil
}

// cancel wakes the worker running w (one that has not picked it up yet
// sees its cause when it does).
func (s *stageSet) cancel(w *WorkRequest) {
	if !s.ready.Load() {
		return
	}
	for _, k := range s.workers {
		k.mu.Lock()
		if k.cur == w {
			if !k.stopped {
				close(k.stop)
				k.stopped = true
			}
			select {
			case k.kick <- struct{}{}:
			default:
			}
		}
		k.mu.Unlock()
	}
}

// close ends the workers (every staged operation finished: Release
// drained the queue pair) and frees their buffers; idempotent.
func (s *stageSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if !s.ready.Load() {
		return
	}
	close(s.ops)
	s.wg.Wait()
}

func (k *stageWorker) loop(ops <-chan *WorkRequest, wg *sync.WaitGroup) {
	defer wg.Done()
	defer k.unbind()
	for w := range ops {
		k.run(w)
	}
}

// run carries out staged w and finishes it.
func (k *stageWorker) run(w *WorkRequest) {
	select { // a stale kick, for an operation that ended
	case <-k.kick:
	default:
	}
	k.mu.Lock()
	k.cur = w // then the cause: a cancel sees one or the other
	if k.stopped {
		k.stop, k.stopped = make(chan struct{}), false
	}
	k.mu.Unlock()
	err := w.wr.CancelCause()
	if err == nil && !w.wr.Deadline.IsZero() && time.Now().After(w.wr.Deadline) {
		err = fmt.Errorf("waiting for a staging buffer: %w", rdmamgr.ErrDeadline)
	}
	span, _ := w.ref.Device()
	if err == nil {
		err = k.bind(span.Driver, span.Ctx)
	}
	if err == nil {
		err = k.hold()
	}
	if err == nil {
		k.err = nil
		if w.wr.Op == backend.OpWrite {
			k.put(w, span)
		} else {
			k.get(w, span)
		}
		k.drain(w)
		err = k.err
		k.letGo()
	}
	k.mu.Lock()
	k.cur = nil
	k.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("%s %d bytes (device memory, staged): %w", w.wr.Op, w.size(), err)
	}
	w.finish(err) // every inner op and copy finished: reported means finished
}

// bind readies the slots for driver d's context ctx: buffers allocated
// in the local registry and pinned, streams made (once; again only for
// another driver or context).
func (k *stageWorker) bind(d cuda.Driver, ctx cuda.Context) error {
	if k.d == d && k.ctx == ctx {
		return nil
	}
	k.unbind()
	k.d, k.ctx = d, ctx
	for i := range k.slots {
		s := &k.slots[i]
		b, err := k.q.reg.Allocate(stageChunk, buffer.AccessReadWrite)
		if err != nil {
			k.unbind()
			return fmt.Errorf("staging buffer: %w", err)
		}
		s.buf = b
		if s.mem, err = k.q.reg.Bytes(b); err != nil {
			k.unbind()
			return fmt.Errorf("staging buffer: %w", err)
		}
		if err = d.HostRegister(ctx, s.mem); err != nil {
			k.unbind()
			return fmt.Errorf("staging buffer: %w", err)
		}
		s.pinned = true
		if s.stream, err = d.StreamCreate(ctx); err != nil {
			k.unbind()
			return fmt.Errorf("staging stream: %w", err)
		}
	}
	return nil
}

// hold takes a reference to each staging buffer for one operation: the
// registry's Close (a manager closing with this queue pair unreleased)
// waits for a running operation only, and fails the next one.
func (k *stageWorker) hold() error {
	for i := range k.slots {
		s := &k.slots[i]
		ref, err := k.q.reg.AcquireLocalOf(&s.buf)
		if err == nil && len(ref.Bytes()) > 0 && &ref.Bytes()[0] != &s.mem[0] {
			ref.Release()
			err = fmt.Errorf("moved: %w", rdmamgr.ErrReleased) // not the memory pinned
		}
		if err != nil {
			k.letGo()
			return fmt.Errorf("staging buffer: %w", err)
		}
		s.ref = ref
	}
	return nil
}

// letGo releases hold's references.
func (k *stageWorker) letGo() {
	for i := range k.slots {
		k.slots[i].ref.Release()
	}
}

// unbind frees what bind made (nothing is in flight).
func (k *stageWorker) unbind() {
	for i := range k.slots {
		s := &k.slots[i]
		if s.stream != 0 {
			_ = k.d.StreamDestroy(k.ctx, s.stream)
			s.stream = 0
		}
		if s.pinned {
			_ = k.d.HostUnregister(k.ctx, s.mem)
			s.pinned = false
		}
		s.mem = nil
		s.ref.Release()
		if s.buf.Length != 0 { // nothing references it: bounded all the same
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = k.q.reg.Release(ctx, s.buf)
			cancel()
			s.buf = buffer.Buffer{}
		}
		s.inner.Reset()
	}
	k.d, k.ctx = nil, 0
}
