package main

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

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

type benchConfig struct {
	op          string
	size        uint64
	count       int
	concurrency int
	warmup      int
	verify      bool
	// maxErrors stops the run once more operations than this failed.
	maxErrors int
	// progress, when not nil, is called about once a second during the
	// timed phase with the operations and bytes done so far.
	progress func(ops, bytes uint64, elapsed time.Duration)
}

// benchResult counts only operations that succeeded: bytes and latencies
// are theirs. A run that ended early says why in stop.
type benchResult struct {
	elapsed   time.Duration
	lat       []time.Duration // of successful operations, sorted
	ops       uint64          // successful operations
	bytes     uint64          // bytes moved by them
	verified  uint64
	mismatch  int
	errs      int
	firstErr  error
	stop      error // nil: all count operations were tried
	handleLen int
	backend   string
}

var (
	errPeerGone    = errors.New("the peer is gone")
	errTooManyErrs = errors.New("too many failed operations (--max-errors)")
)

// progressEvery is how often the progress line is rewritten.
var progressEvery = time.Second

// benchRun is one timed (or warm-up) phase's shared state.
type benchRun struct {
	cfg       benchConfig
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

// runBench moves data between mgr and the peer behind peer.
func runBench(ctx context.Context, mgr *actor.Manager, peer *actor.Client, cfg benchConfig) (*benchResult, error) {
	total := cfg.size * uint64(cfg.concurrency)
	remote, err := peer.RequestBuffer(ctx, total, buffer.AccessReadWrite)
	if err != nil {
		return nil, err // the client names the request and the peer
	}
	res := &benchResult{handleLen: remote.MarshalledSize()}
	defer func() {
		if errors.Is(res.stop, errPeerGone) {
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
	defer b.qp.Release()
	res.backend = string(b.qp.Kind())
	if cfg.warmup > 0 {
		b.phase(ctx, cfg.warmup, nil)
		if b.errs.Load() > 0 {
			res.stop = fmt.Errorf("warm-up: %w", b.firstErr)
			res.errs, res.firstErr = int(b.errs.Load()), b.firstErr
			return res, nil
		}
		b = &benchRun{cfg: cfg, qp: b.qp, local: b.local, remote: b.remote, check: b.check,
			localMem: b.localMem, checkMem: b.checkMem, pattern: b.pattern}
	}
	res.elapsed, res.stop = b.phase(ctx, cfg.count, cfg.progress)
	res.ops, res.verified = b.ops.Load(), b.verified.Load()
	res.bytes = res.ops * cfg.size
	res.errs, res.firstErr, res.mismatch = int(b.errs.Load()), b.firstErr, b.mismatch
	for _, l := range b.latencies {
		res.lat = append(res.lat, l...)
	}
	slices.Sort(res.lat)
	return res, nil
}

// prepare gets the local buffers and the queue pair and fills the pattern.
func (b *benchRun) prepare(ctx context.Context, mgr *actor.Manager, peer *actor.Client) error {
	total := b.cfg.size * uint64(b.cfg.concurrency)
	var err error
	if b.local, err = mgr.Client().RequestBuffer(ctx, total, buffer.AccessReadWrite); err != nil {
		return err
	}
	if b.check, err = mgr.Client().RequestBuffer(ctx, total, buffer.AccessReadWrite); err != nil {
		return err
	}
	if b.qp, err = mgr.Client().RequestQueuePair(ctx, peer.PID()); err != nil {
		return err
	}
	b.localMem, _ = mgr.Bytes(b.local)
	b.checkMem, _ = mgr.Bytes(b.check)
	b.pattern = make([]byte, total)
	rand.Read(b.pattern)
	copy(b.localMem, b.pattern)
	if b.cfg.op == "get" {
		// The peer's buffer holds the pattern; every get must return it.
		if err := b.qp.Put(b.local, b.remote).Wait(ctx); err != nil {
			b.qp.Release()
			return fmt.Errorf("seed peer buffer: %w", err)
		}
	}
	return nil
}

// phase runs n operations over cfg.concurrency workers and returns how
// long it took and why it stopped early (nil: it did not).
func (b *benchRun) phase(ctx context.Context, n int, progress func(uint64, uint64, time.Duration)) (time.Duration, error) {
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	b.stopRun = stop
	b.latencies = make([][]time.Duration, b.cfg.concurrency)
	var wg sync.WaitGroup
	t0 := time.Now()
	for s := 0; s < b.cfg.concurrency; s++ {
		b.latencies[s] = make([]time.Duration, 0, n/b.cfg.concurrency+1)
		wg.Add(1)
		go func() { defer wg.Done(); b.worker(rctx, s, int64(n)) }()
	}
	if progress != nil {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		t := time.NewTicker(progressEvery)
	loop:
		for {
			select {
			case <-done:
				break loop
			case <-t.C:
				o := b.ops.Load()
				progress(o, o*b.cfg.size, time.Since(t0))
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
	off := uint64(slot) * cfg.size
	l, _ := b.local.Slice(off, cfg.size)
	r, _ := b.remote.Slice(off, cfg.size)
	lm := b.localMem[off : off+cfg.size]
	var wr queuepair.WorkRequest // reused: the data path allocates nothing
	for ctx.Err() == nil {
		i := b.next.Add(1) - 1
		if i >= limit {
			return
		}
		if cfg.verify && cfg.op == "put" {
			stamp(lm, uint64(i))
		}
		if cfg.verify && cfg.op == "get" {
			clear(lm)
		}
		t0 := time.Now()
		if cfg.op == "put" {
			b.qp.PostPut(&wr, l, r)
		} else {
			b.qp.PostGet(&wr, l, r)
		}
		err := wr.Wait(ctx)
		d := time.Since(t0)
		if err != nil {
			if ctx.Err() == nil {
				b.fail(err)
			}
			continue
		}
		b.latencies[slot] = append(b.latencies[slot], d)
		b.ops.Add(1)
		if cfg.verify {
			b.verifyOp(ctx, slot, off)
		}
	}
}

// verifyOp checks the bytes of the operation that just completed on slot.
func (b *benchRun) verifyOp(ctx context.Context, slot int, off uint64) {
	size := b.cfg.size
	lm := b.localMem[off : off+size]
	ok := true
	if b.cfg.op == "put" {
		k, _ := b.check.Slice(off, size)
		r, _ := b.remote.Slice(off, size)
		km := b.checkMem[off : off+size]
		clear(km)
		if err := b.qp.Get(k, r).Wait(ctx); err != nil {
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
	case errors.Is(err, backend.ErrPeerGone):
		b.stopRun(errPeerGone)
	case n > int64(b.cfg.maxErrors):
		b.stopRun(errTooManyErrs)
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
