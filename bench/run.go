package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// Config is one run.
type Config struct {
	Op          string // put or get
	Size        uint64 // bytes per operation
	Count       int    // timed operations
	Concurrency int    // operations in flight, each on its own slot of the buffers
	// Ring: one goroutine keeps Concurrency operations in flight through
	// a completion queue, posting the next on every slot reaped as one
	// chain (a ring of reusable work requests; ring.go), instead of one
	// goroutine per slot that posts and waits.
	Ring   bool
	Warmup int  // untimed operations first
	Verify bool // check every byte of every operation
	// SharedSlot: every operation in flight uses the first slot's bytes
	// (as ucx_perftest's one buffer of the message size does), so the
	// operations move Size bytes of memory, not Size × Concurrency; not
	// with Verify.
	SharedSlot bool
	// SignalEvery, with Ring and above 1: selective signaling, as
	// perftest's --cq-mod. In each chain the ring posts, every
	// SignalEvery-th operation and the last are signaled, the rest
	// unsignaled (queuepair.Op.Unsignaled): a reaped signal vouches for
	// every operation posted before it, and the ring re-posts them all.
	SignalEvery int
	// MaxErrors stops the run once more operations than this failed.
	MaxErrors int
	// Progress, when not nil, is called about every ProgressEvery (default
	// a second) during the timed phase with the operations and bytes done
	// so far.
	Progress      func(ops, bytes uint64, elapsed time.Duration)
	ProgressEvery time.Duration
	// Memory is where the buffers of both ends are (buffer.Host, the
	// default, or a CUDA device's memory: the peer must serve GPU buffers,
	// and mgr have a driver; the queue pair stages the local one, the
	// peer's owner its own). Not with Verify.
	Memory buffer.Location
	// PeerMemory, when not nil, is where the peer's buffer is instead
	// (GPU to host: Memory a device's, PeerMemory host; host to GPU the
	// other way round).
	PeerMemory *buffer.Location
	// Start, when not nil, is called after the warm-up and before the
	// timed phase (bench --procs starts its processes' timed phases
	// together this way); an error ends the run before it (Result.Stop).
	Start func(ctx context.Context) error
}

// Result counts only operations that succeeded: bytes and latencies are
// theirs. A run that ended early says why in Stop.
type Result struct {
	Elapsed  time.Duration
	Lat      []time.Duration // of successful operations, sorted
	Ops      uint64          // successful operations
	Bytes    uint64          // bytes moved by them
	Verified uint64          // bytes checked
	Mismatch int             // operations that moved wrong bytes
	Errs     int             // failed operations
	FirstErr error
	Stop     error // nil: all Count operations were tried
	Backend  string
}

// benchRun is one timed (or warm-up) phase's shared state.
type benchRun struct {
	cfg       Config
	qp        *queuepair.QueuePair
	local     buffer.Buffer
	remote    buffer.Buffer
	check     buffer.Buffer
	localMem  []byte
	checkMem  []byte
	pattern   []byte
	next      atomic.Int64 // tickets: operation numbers handed to workers
	ops       atomic.Uint64
	verified  atomic.Uint64
	errs      atomic.Int64
	stopRun   context.CancelCauseFunc
	mu        sync.Mutex // guards firstErr and mismatch
	firstErr  error
	mismatch  int
	latencies [][]time.Duration // per worker
}

// peerMemory is where the peer's buffer is: PeerMemory, else Memory.
func (c Config) peerMemory() buffer.Location {
	if c.PeerMemory != nil {
		return *c.PeerMemory
	}
	return c.Memory
}

// Run moves data between mgr and the peer behind peer as cfg says: it asks
// the peer for a buffer of Size × Concurrency bytes, and mgr for a queue
// pair to it and local buffers of that size, runs Warmup untimed
// operations, then Count timed ones, and gives everything back. An error
// is one of the set-up; what the operations did is in the Result. Each
// operation a worker posts and waits for is timed with LatencyClock.
func Run(ctx context.Context, mgr *actor.Manager, peer *actor.Client, cfg Config) (*Result, error) {
	clock() // calibrated before anything is timed
	total := cfg.Size * uint64(cfg.Concurrency)
	for _, loc := range []buffer.Location{cfg.Memory, cfg.peerMemory()} {
		if loc != buffer.Host && cfg.Verify {
			return nil, fmt.Errorf("bench: verify of buffers in %v: %w", loc, rdmamgr.ErrNotSupported)
		}
	}
	remote, err := peer.RequestBuffer(ctx, total, buffer.AccessReadWrite, actor.WithDevice(cfg.peerMemory()))
	if err != nil {
		return nil, err // the client names the request and the peer
	}
	res := &Result{}
	defer func() {
		if errors.Is(res.Stop, rdmamgr.ErrPeerGone) {
			return // nobody to release it at
		}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = peer.ReleaseBuffer(rctx, remote)
	}()
	b := &benchRun{cfg: cfg, remote: remote}
	if err := b.prepare(ctx, mgr, peer); err != nil {
		return nil, err
	}
	defer b.release(mgr)
	res.Backend = string(b.qp.Kind())
	if cfg.Warmup > 0 {
		b.phase(ctx, cfg.Warmup, nil)
		if b.errs.Load() > 0 {
			res.Stop = fmt.Errorf("warm-up: %w", b.firstErr)
			res.Errs, res.FirstErr = int(b.errs.Load()), b.firstErr
			return res, nil
		}
		b = &benchRun{cfg: cfg, qp: b.qp, local: b.local, remote: b.remote, check: b.check,
			localMem: b.localMem, checkMem: b.checkMem, pattern: b.pattern}
	}
	if cfg.Start != nil {
		if err := cfg.Start(ctx); err != nil {
			res.Stop = fmt.Errorf("start: %w", err)
			return res, nil
		}
	}
	res.Elapsed, res.Stop = b.phase(ctx, cfg.Count, cfg.Progress)
	res.Ops, res.Verified = b.ops.Load(), b.verified.Load()
	res.Bytes = res.Ops * cfg.Size
	res.Errs, res.FirstErr, res.Mismatch = int(b.errs.Load()), b.firstErr, b.mismatch
	for _, l := range b.latencies {
		res.Lat = append(res.Lat, l...)
	}
	slices.Sort(res.Lat)
	return res, nil
}

// prepare gets the local buffers and the queue pair and fills the pattern;
// on failure it gives back what it got.
func (b *benchRun) prepare(ctx context.Context, mgr *actor.Manager, peer *actor.Client) (err error) {
	defer func() {
		if err != nil {
			b.release(mgr)
		}
	}()
	total := b.cfg.Size * uint64(b.cfg.Concurrency)
	if b.local, err = mgr.Client().RequestBuffer(ctx, total, buffer.AccessReadWrite, actor.WithDevice(b.cfg.Memory)); err != nil {
		return err
	}
	if b.check, err = mgr.Client().RequestBuffer(ctx, total, buffer.AccessReadWrite); err != nil {
		return err
	}
	if b.qp, err = mgr.Client().RequestQueuePair(ctx, peer.PID()); err != nil {
		return err
	}
	b.localMem, _ = mgr.Bytes(b.local) // nil for device memory (no Verify)
	b.checkMem, _ = mgr.Bytes(b.check)
	b.pattern = make([]byte, total)
	rand.Read(b.pattern)
	copy(b.localMem, b.pattern)
	if b.cfg.Op == "get" {
		// The peer's buffer holds the pattern; every get must return it.
		if err := b.qp.Put(ctx, b.local, b.remote).Wait(ctx); err != nil {
			return fmt.Errorf("seed peer buffer: %w", err)
		}
	}
	return nil
}

// release gives back the queue pair and the local buffers: a run leaves
// the manager as it found it (bench --baseline runs many on one manager).
func (b *benchRun) release(mgr *actor.Manager) {
	if b.qp != nil {
		b.qp.Release()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, l := range []buffer.Buffer{b.local, b.check} {
		if l.Length > 0 {
			_ = mgr.Client().ReleaseBuffer(ctx, l)
		}
	}
}

// phase runs n operations over cfg.Concurrency workers and returns how
// long it took and why it stopped early (nil: it did not).
func (b *benchRun) phase(ctx context.Context, n int, progress func(uint64, uint64, time.Duration)) (time.Duration, error) {
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	b.stopRun = stop
	b.latencies = make([][]time.Duration, b.cfg.Concurrency)
	var wg sync.WaitGroup
	for s := 0; s < b.cfg.Concurrency; s++ {
		switch {
		case !b.cfg.Ring:
			b.latencies[s] = prefault(make([]time.Duration, 0, min(n, maxPrefault)/b.cfg.Concurrency+1))
		case s == 0: // the ring records every slot's in one slice, in order
			b.latencies[s] = prefault(make([]time.Duration, 0, min(n, maxPrefault)))
		}
	}
	t0 := time.Now()
	if b.cfg.Ring {
		wg.Add(1)
		go func() { defer wg.Done(); b.ring(rctx, int64(n)) }()
	}
	for s := 0; s < b.cfg.Concurrency && !b.cfg.Ring; s++ {
		wg.Add(1)
		go func() { defer wg.Done(); b.worker(rctx, s, int64(n)) }()
	}
	if progress != nil {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		every := b.cfg.ProgressEvery
		if every <= 0 {
			every = time.Second
		}
		t := time.NewTicker(every)
	loop:
		for {
			select {
			case <-done:
				break loop
			case <-t.C:
				o := b.ops.Load()
				progress(o, o*b.cfg.Size, time.Since(t0))
			}
		}
		t.Stop()
	}
	wg.Wait()
	el := time.Since(t0)
	if rctx.Err() != nil {
		return el, context.Cause(rctx)
	}
	return el, nil
}

// worker runs operations on its slot of the buffers until the tickets run
// out or the run stops. Operations ended by the stop count neither as
// done nor as failed.
func (b *benchRun) worker(ctx context.Context, slot int, limit int64) {
	cfg := b.cfg
	off := uint64(slot) * cfg.Size
	l, _ := b.local.Slice(off, cfg.Size)
	r, _ := b.remote.Slice(off, cfg.Size)
	var wr queuepair.WorkRequest // reused: the data path allocates nothing
	clk := clock()               // clock.go
	for ctx.Err() == nil {
		i := b.next.Add(1) - 1
		if i >= limit {
			return
		}
		if cfg.Verify {
			b.prepareSlot(off, uint64(i))
		}
		t0 := clk.Now()
		if cfg.Op == "put" {
			b.qp.PostPut(ctx, &wr, l, r)
		} else {
			b.qp.PostGet(ctx, &wr, l, r)
		}
		err := wr.Wait(ctx)
		if b.done(ctx, slot, off, clk.Since(t0), err) {
			b.ops.Add(1)
		}
	}
}

// prepareSlot readies a slot's local memory for a verified operation:
// stamped with the op number for a put, cleared for a get.
func (b *benchRun) prepareSlot(off, seq uint64) {
	lm := b.localMem[off : off+b.cfg.Size]
	if b.cfg.Op == "put" {
		stamp(lm, seq)
	} else {
		clear(lm)
	}
}

// done records an operation of slot that completed with err after d and
// reports whether it succeeded: the caller adds it to b.ops (the ring once
// per batch). Operations ended by the stop count neither as done nor as
// failed.
func (b *benchRun) done(ctx context.Context, slot int, off uint64, d time.Duration, err error) bool {
	if err != nil {
		if ctx.Err() == nil {
			b.fail(err)
		}
		return false
	}
	b.latencies[slot] = append(b.latencies[slot], d)
	if b.cfg.Verify {
		b.verifyOp(ctx, slot, off)
	}
	return true
}

// verifyOp checks the bytes of the operation that just completed on slot.
func (b *benchRun) verifyOp(ctx context.Context, slot int, off uint64) {
	size := b.cfg.Size
	lm := b.localMem[off : off+size]
	ok := true
	if b.cfg.Op == "put" {
		k, _ := b.check.Slice(off, size)
		r, _ := b.remote.Slice(off, size)
		km := b.checkMem[off : off+size]
		clear(km)
		if err := b.qp.Get(ctx, k, r).Wait(ctx); err != nil {
			if ctx.Err() == nil {
				b.fail(fmt.Errorf("verify read-back: %w", err))
			}
			return
		}
		ok = bytes.Equal(km, lm)
	} else {
		ok = bytes.Equal(lm, b.pattern[off:off+size])
	}
	if !ok {
		b.mu.Lock()
		b.mismatch++
		b.mu.Unlock()
	}
	b.verified.Add(size)
}

// fail counts a failed operation and stops the run when the peer is gone
// or too many failed.
func (b *benchRun) fail(err error) {
	b.mu.Lock()
	if b.firstErr == nil {
		b.firstErr = err
	}
	b.mu.Unlock()
	n := b.errs.Add(1)
	switch {
	case errors.Is(err, rdmamgr.ErrPeerGone):
		b.stopRun(errPeerGone)
	case n > int64(b.cfg.MaxErrors):
		b.stopRun(ErrTooManyErrors)
	}
}

// stamp writes the op number into every 4 KiB of p so a stale or misplaced
// transfer cannot pass verification.
func stamp(p []byte, seq uint64) {
	for o := 0; o+8 <= len(p); o += 4096 {
		binary.LittleEndian.PutUint64(p[o:], seq^uint64(o))
	}
	if len(p) < 8 {
		for j := range p {
			p[j] = byte(seq) + byte(j)
		}
	}
}

// maxPrefault is the most latencies a phase makes room for before it is
// timed (256 MiB); a longer run grows its slices as it goes.
const maxPrefault = 1 << 25

// prefault touches every page of l's capacity, so the timed run records
// latencies without a page fault (8 bytes an operation: 80 MB for ten
// million, 20,000 faults).
func prefault(l []time.Duration) []time.Duration {
	all := l[:cap(l)]
	for i := 0; i < len(all); i += 512 { // 4 KiB
		all[i] = 0
	}
	return l
}
