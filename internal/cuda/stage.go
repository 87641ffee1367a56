package cuda

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr"
)

// StageChunk is the default size of one staging buffer: large enough that
// a socket write or read of it costs far more than queuing a copy, small
// enough that the pipeline fills quickly.
const StageChunk = 256 << 10

// Stager moves device memory through two pinned host buffers in a
// pipeline, for a data path that moves host bytes (a TCP socket): while
// the caller consumes one chunk (writes it to the socket) the next
// chunk's device-to-host copy runs, and while the caller fills one chunk
// (reads it from the socket) the previous chunk's host-to-device copy
// runs. Each buffer has its own stream. A Stager is one goroutine's at a
// time (Stagers hands them out); its calls allocate nothing.
//
// Contract ("reported means finished"): when Download or Upload returns,
// with or without an error, no copy it queued is still running, so the
// caller may release its reference to the device memory at once.
type Stager struct {
	d       Driver
	ctx     Context
	bufs    [2][]byte
	streams [2]Stream
	broken  bool // a driver call failed: its streams may hold a sticky error
}

// NewStager makes a Stager in ctx with two pinned buffers of chunk bytes
// (StageChunk if chunk <= 0); on an error it frees what it made.
func NewStager(d Driver, ctx Context, chunk int) (*Stager, error) {
	if chunk <= 0 {
		chunk = StageChunk
	}
	s := &Stager{d: d, ctx: ctx}
	for i := range s.bufs {
		var err error
		if s.bufs[i], err = d.HostAlloc(ctx, uint64(chunk)); err == nil {
			s.streams[i], err = d.StreamCreate(ctx)
		}
		if err != nil {
			_ = s.Close() // what was made; err is the one to report
			return nil, err
		}
	}
	return s, nil
}

// Chunk returns the size of one staging buffer.
func (s *Stager) Chunk() int { return len(s.bufs[0]) }

// Download copies n bytes at src to the caller through the staging
// buffers: emit is called for each chunk in order (at most Chunk bytes,
// valid only during the call) while the next chunk's copy runs. The
// first error (a copy's, or emit's) ends it.
func (s *Stager) Download(src DevicePtr, n uint64, emit func([]byte) error) error {
	chunk := uint64(len(s.bufs[0]))
	issue := func(k uint64) error {
		off := k * chunk
		m := min(chunk, n-off)
		return s.drv(s.d.CopyDtoH(s.ctx, s.bufs[k%2][:m], src+DevicePtr(off), s.streams[k%2]))
	}
	chunks := (n + chunk - 1) / chunk
	var err error
	for k := uint64(0); k < min(chunks, 2) && err == nil; k++ {
		err = issue(k)
	}
	for k := uint64(0); k < chunks && err == nil; k++ {
		if err = s.drv(s.d.StreamSynchronize(s.ctx, s.streams[k%2])); err != nil {
			break
		}
		off := k * chunk
		if err = emit(s.bufs[k%2][:min(chunk, n-off)]); err != nil {
			break
		}
		if k+2 < chunks {
			err = issue(k + 2) // into the buffer just consumed
		}
	}
	return s.drain(err)
}

// Upload copies n bytes from the caller to dst through the staging
// buffers: fill is called for each chunk in order (at most Chunk bytes,
// to be filled whole) while the previous chunk's copy to the device runs.
// The first error (fill's, or a copy's) ends it; the device memory then
// holds an unspecified prefix of the bytes.
func (s *Stager) Upload(dst DevicePtr, n uint64, fill func([]byte) error) error {
	chunk := uint64(len(s.bufs[0]))
	chunks := (n + chunk - 1) / chunk
	var err error
	for k := uint64(0); k < chunks; k++ {
		if k >= 2 { // the buffer's previous copy (chunk k-2) must be done
			if err = s.drv(s.d.StreamSynchronize(s.ctx, s.streams[k%2])); err != nil {
				break
			}
		}
		off := k * chunk
		b := s.bufs[k%2][:min(chunk, n-off)]
		if err = fill(b); err != nil {
			break
		}
		if err = s.drv(s.d.CopyHtoD(s.ctx, dst+DevicePtr(off), b, s.streams[k%2])); err != nil {
			break
		}
	}
	return s.drain(err)
}

// drain waits for both streams (whatever err is) and returns err, else
// the first stream's error.
func (s *Stager) drain(err error) error {
	for _, st := range s.streams {
		if e := s.drv(s.d.StreamSynchronize(s.ctx, st)); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// drv notes a failed driver call (err non-nil): s is broken.
func (s *Stager) drv(err error) error {
	if err != nil {
		s.broken = true
	}
	return err
}

// Broken reports whether a driver call of s failed (a copy, a stream's
// synchronization): its streams may hold a sticky error, so it is not
// reused (Stagers.Put frees it). An error of the caller's emit or fill
// does not break it.
func (s *Stager) Broken() bool { return s.broken }

// Close frees the buffers and streams; idempotent.
func (s *Stager) Close() error {
	var errs []error
	for i := range s.bufs {
		if s.streams[i] != 0 {
			errs = append(errs, s.d.StreamDestroy(s.ctx, s.streams[i]))
			s.streams[i] = 0
		}
		if s.bufs[i] != nil {
			errs = append(errs, s.d.HostFree(s.ctx, s.bufs[i]))
			s.bufs[i] = nil
		}
	}
	return errors.Join(errs...)
}

// Stagers hands out Stagers per (driver, context), made on first need
// and reused: a data path's operation takes one (Get) and gives it back
// (Put), allocating nothing once enough exist. Safe for concurrent use.
//
// Pinned memory is bounded: at most maxOut Stagers are out at once (Get
// waits up to its wait for one to come back, then fails with
// rdmamgr.ErrLimit), and at most maxIdle per context are kept once Put
// back (the rest are freed at once). So the pinned memory held is at most
// (maxOut + maxIdle per context) x 2 x chunk.
type Stagers struct {
	chunk   int
	maxIdle int
	sem     chan struct{} // one token per Stager out

	mu     sync.Mutex
	free   map[stagerKey][]*Stager
	closed bool
}

type stagerKey struct {
	d   Driver
	ctx Context
}

// Default bounds of NewStagers.
const (
	DefaultMaxStagersOut  = 32 // 16 MiB of pinned memory out, at 256 KiB chunks
	DefaultMaxStagersIdle = 4  // per context
)

// NewStagers returns an empty set of Stagers of chunk-byte buffers
// (StageChunk if chunk <= 0), at most maxOut out at once and maxIdle idle
// per context (DefaultMaxStagersOut, DefaultMaxStagersIdle where <= 0).
func NewStagers(chunk, maxOut, maxIdle int) *Stagers {
	if maxOut <= 0 {
		maxOut = DefaultMaxStagersOut
	}
	if maxIdle <= 0 {
		maxIdle = DefaultMaxStagersIdle
	}
	return &Stagers{chunk: chunk, maxIdle: maxIdle, sem: make(chan struct{}, maxOut),
		free: make(map[stagerKey][]*Stager)}
}

// Get returns a free Stager of (d, ctx), or a new one. When maxOut are
// out it waits up to wait for one to be Put back, then fails with
// rdmamgr.ErrLimit.
func (p *Stagers) Get(d Driver, ctx Context, wait time.Duration) (*Stager, error) {
	select {
	case p.sem <- struct{}{}:
	default:
		if wait <= 0 {
			return nil, p.limitErr()
		}
		t := time.NewTimer(wait)
		select {
		case p.sem <- struct{}{}:
			t.Stop()
		case <-t.C:
			return nil, p.limitErr()
		}
	}
	k := stagerKey{d, ctx}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.sem
		return nil, fmt.Errorf("cuda: stagers: %w", rdmamgr.ErrClosed)
	}
	if f := p.free[k]; len(f) > 0 {
		s := f[len(f)-1]
		f[len(f)-1] = nil
		p.free[k] = f[:len(f)-1]
		p.mu.Unlock()
		return s, nil
	}
	p.mu.Unlock()
	s, err := NewStager(d, ctx, p.chunk)
	if err != nil {
		<-p.sem
		return nil, err
	}
	return s, nil
}

func (p *Stagers) limitErr() error {
	return fmt.Errorf("cuda: stagers: %d staging buffer pairs in use, the most allowed: %w", cap(p.sem), rdmamgr.ErrLimit)
}

// Put gives s, which Get returned, back: kept for reuse while fewer than
// maxIdle of its context are idle, else (or after Close, or when s is
// Broken) freed.
func (p *Stagers) Put(s *Stager) {
	p.mu.Lock()
	k := stagerKey{s.d, s.ctx}
	keep := !p.closed && !s.broken && len(p.free[k]) < p.maxIdle
	if keep {
		p.free[k] = append(p.free[k], s)
	}
	p.mu.Unlock()
	if !keep {
		s.Close()
	}
	<-p.sem
}

// Close frees the free Stagers; one still out is freed when Put back.
// Idempotent.
func (p *Stagers) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for _, f := range p.free {
		for _, s := range f {
			errs = append(errs, s.Close())
		}
	}
	p.free = nil
	return errors.Join(errs...)
}
