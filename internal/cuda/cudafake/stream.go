package cudafake

import (
	"sync"

	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// stream runs its copies in order in a goroutine it owns; stop waits for
// that goroutine.
type stream struct {
	w *World

	mu      sync.Mutex
	cond    sync.Cond
	queue   []func() error
	pending int   // queued or running
	err     error // the first copy that failed; sticky
	closing bool
	done    chan struct{}
}

func newStream(w *World) *stream {
	s := &stream{w: w, done: make(chan struct{})}
	s.cond.L = &s.mu
	go s.run()
	return s
}

func (s *stream) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closing {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		op := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()

		s.w.waitGate()
		err := op()

		s.mu.Lock()
		s.pending--
		if err != nil && s.err == nil {
			s.err = err
		}
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// push queues op; false when the stream is being destroyed.
func (s *stream) push(op func() error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.queue = append(s.queue, op)
	s.pending++
	s.cond.Broadcast()
	return true
}

func (s *stream) sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.pending > 0 {
		s.cond.Wait()
	}
	return s.err
}

// stop lets the queued copies finish, then ends the goroutine and waits.
func (s *stream) stop() {
	s.mu.Lock()
	s.closing = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.done
}

// StreamCreate implements cuda.Driver.
func (d *Driver) StreamCreate(ctx cuda.Context) (cuda.Stream, error) {
	unlock, err := d.lock("cuStreamCreate", ctx)
	if err != nil {
		return 0, err
	}
	defer unlock()
	d.nextSID++
	d.streams[d.nextSID] = newStream(d.w)
	d.w.stats.Streams++
	return d.nextSID, nil
}

func (d *Driver) stream(call string, ctx cuda.Context, id cuda.Stream) (*stream, error) {
	unlock, err := d.lock(call, ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s, ok := d.streams[id]
	if !ok {
		return nil, fail(call, cuda.ErrorInvalidHandle)
	}
	return s, nil
}

// StreamQuery implements cuda.Driver.
func (d *Driver) StreamQuery(ctx cuda.Context, id cuda.Stream) (bool, error) {
	s, err := d.stream("cuStreamQuery", ctx, id)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false, s.err
	}
	return s.pending == 0, nil
}

// StreamSynchronize implements cuda.Driver.
func (d *Driver) StreamSynchronize(ctx cuda.Context, id cuda.Stream) error {
	s, err := d.stream("cuStreamSynchronize", ctx, id)
	if err != nil {
		return err
	}
	return s.sync()
}

// StreamDestroy implements cuda.Driver: queued copies finish first (the
// stand-in waits for them; the real driver returns at once).
func (d *Driver) StreamDestroy(ctx cuda.Context, id cuda.Stream) error {
	s, err := d.stream("cuStreamDestroy", ctx, id)
	if err != nil {
		return err
	}
	d.w.mu.Lock()
	if d.streams[id] != s {
		d.w.mu.Unlock()
		return fail("cuStreamDestroy", cuda.ErrorInvalidHandle)
	}
	delete(d.streams, id)
	d.w.stats.Streams--
	d.w.mu.Unlock()
	s.stop()
	return nil
}

// pinnedLocked reports whether b lies in a HostAlloc'd or registered range.
func (d *Driver) pinnedLocked(b []byte) bool {
	p, n := span(b)
	for _, r := range d.host {
		if p >= r.start && n <= r.n && p-r.start <= r.n-n {
			return true
		}
	}
	return false
}

// enqueue checks the call's context and stream, lets check validate the
// ranges under the lock, and queues op.
func (d *Driver) enqueue(call string, ctx cuda.Context, id cuda.Stream, check func() (func() error, error)) error {
	s, err := d.stream(call, ctx, id)
	if err != nil {
		return err
	}
	d.w.mu.Lock()
	op, err := check()
	d.w.mu.Unlock()
	if err != nil {
		return err
	}
	ok := s.push(func() error {
		d.w.mu.Lock()
		defer d.w.mu.Unlock()
		if err := op(); err != nil {
			d.w.stats.FailedCopies++
			return fail(call, cuda.ErrorIllegalAddress)
		}
		return nil
	})
	if !ok {
		return fail(call, cuda.ErrorInvalidHandle) // destroyed meanwhile
	}
	return nil
}

var errFreed = cuda.ErrIllegalAddress

// CopyHtoD implements cuda.Driver.
func (d *Driver) CopyHtoD(ctx cuda.Context, dst cuda.DevicePtr, src []byte, id cuda.Stream) error {
	return d.enqueue("cuMemcpyHtoDAsync", ctx, id, func() (func() error, error) {
		a, off, err := d.resolveLocked("cuMemcpyHtoDAsync", dst, uint64(len(src)))
		if err != nil || len(src) == 0 {
			return func() error { return nil }, err
		}
		pinned := d.pinnedLocked(src)
		return func() error {
			if a.freed {
				return errFreed
			}
			d.count(&d.w.stats.CopiesHtoD, copy(a.mem[off:], src), pinned)
			return nil
		}, nil
	})
}

// CopyDtoH implements cuda.Driver.
func (d *Driver) CopyDtoH(ctx cuda.Context, dst []byte, src cuda.DevicePtr, id cuda.Stream) error {
	return d.enqueue("cuMemcpyDtoHAsync", ctx, id, func() (func() error, error) {
		a, off, err := d.resolveLocked("cuMemcpyDtoHAsync", src, uint64(len(dst)))
		if err != nil || len(dst) == 0 {
			return func() error { return nil }, err
		}
		pinned := d.pinnedLocked(dst)
		return func() error {
			if a.freed {
				return errFreed
			}
			d.count(&d.w.stats.CopiesDtoH, copy(dst, a.mem[off:off+uint64(len(dst))]), pinned)
			return nil
		}, nil
	})
}

// CopyDtoD implements cuda.Driver.
func (d *Driver) CopyDtoD(ctx cuda.Context, dst, src cuda.DevicePtr, n uint64, id cuda.Stream) error {
	const call = "cuMemcpyDtoDAsync"
	return d.enqueue(call, ctx, id, func() (func() error, error) {
		if n == 0 {
			return func() error { return nil }, nil
		}
		da, doff, err := d.resolveLocked(call, dst, n)
		if err != nil {
			return nil, err
		}
		sa, soff, err := d.resolveLocked(call, src, n)
		if err != nil {
			return nil, err
		}
		return func() error {
			if da.freed || sa.freed {
				return errFreed
			}
			d.count(&d.w.stats.CopiesDtoD, copy(da.mem[doff:doff+n], sa.mem[soff:soff+n]), true)
			return nil
		}, nil
	})
}

// MemsetAsync implements cuda.Driver (not counted as a copy).
func (d *Driver) MemsetAsync(ctx cuda.Context, dst cuda.DevicePtr, v byte, n uint64, id cuda.Stream) error {
	return d.enqueue("cuMemsetD8Async", ctx, id, func() (func() error, error) {
		if n == 0 {
			return func() error { return nil }, nil
		}
		a, off, err := d.resolveLocked("cuMemsetD8Async", dst, n)
		if err != nil {
			return nil, err
		}
		return func() error {
			if a.freed {
				return errFreed
			}
			b := a.mem[off : off+n]
			if v == 0 {
				clear(b)
				return nil
			}
			for i := range b {
				b[i] = v
			}
			return nil
		}, nil
	})
}

// count records a finished copy (w.mu held).
func (d *Driver) count(c *int, n int, pinned bool) {
	*c++
	d.w.stats.BytesCopied += uint64(n)
	if !pinned {
		d.w.stats.PageableCopies++
	}
}
