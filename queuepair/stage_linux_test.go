//go:build linux

package queuepair_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// stageChunk is the staging buffer size in these tests: small, so a few
// KiB cross several chunks.
const stageChunk = 4096

// stageEnv is a queue pair on a real TCP route whose local registry has
// a CUDA stand-in: a device buffer of n bytes on the local side, a host
// buffer of n bytes at the peer.
type stageEnv struct {
	w       *cudafake.World
	qp      *queuepair.QueuePair
	regA    *memreg.Registry
	regB    *memreg.Registry
	dev     buffer.Buffer // local, device memory
	remote  buffer.Buffer // peer, host memory
	remMem  []byte
	route   backend.Route
	timeout time.Duration
	base    cudafake.Stats // before the first staged operation
}

func newStageEnv(t *testing.T, n int) *stageEnv { return newStageEnvOn(t, n, nil) }

// newStageEnvOn is newStageEnv with the local driver wrap(the stand-in's).
func newStageEnvOn(t *testing.T, n int, wrap func(*cudafake.Driver) cuda.Driver) *stageEnv {
	return newStageEnvKind(t, newTCP, n, wrap)
}

// newStageEnvKind is newStageEnvOn on backends of mk.
func newStageEnvKind(t *testing.T, mk func(testing.TB, uint64) (backend.Backend, *memreg.Registry), n int, wrap func(*cudafake.Driver) cuda.Driver) *stageEnv {
	t.Helper()
	t.Cleanup(queuepair.SetStageChunk(stageChunk))
	p := backendtest.NewPair(t, backendtest.Factory{NewBackend: mk, Timeout: time.Minute})
	w := cudafake.NewWorld(cudafake.Config{DeviceMemory: 64 << 20})
	d := w.Process()
	t.Cleanup(func() { d.Close() })
	var drv cuda.Driver = d
	if wrap != nil {
		drv = wrap(d)
	}
	p.RegA.SetCUDA(drv, nil)
	qp := backendtest.NewQueuePair(t, p.Route, p.RegA, p.A.Kind(), time.Minute, nil)
	dev, err := p.RegA.AllocateAt(buffer.CUDA(0), uint64(n), buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	rb, rm := backendtest.Alloc(t, p.RegB, n, buffer.AccessReadWrite|buffer.AccessNotify)
	return &stageEnv{w: w, qp: qp, regA: p.RegA, regB: p.RegB, dev: dev, remote: rb, remMem: rm, route: p.Route, timeout: time.Minute, base: w.Stats()}
}

// devCopy copies between host bytes and device buffer h (toDev: into it).
func devCopy(t *testing.T, reg *memreg.Registry, h buffer.Buffer, b []byte, toDev bool) {
	t.Helper()
	ref, err := reg.AcquireLocalAny(&h)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	span, _ := ref.Device()
	d := span.Driver
	pin, err := d.HostAlloc(span.Ctx, uint64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.HostFree(span.Ctx, pin)
	st, err := d.StreamCreate(span.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.StreamDestroy(span.Ctx, st)
	if toDev {
		copy(pin, b)
		err = d.CopyHtoD(span.Ctx, span.Ptr, pin, st)
	} else {
		err = d.CopyDtoH(span.Ctx, pin, span.Ptr, st)
	}
	if err == nil {
		err = d.StreamSynchronize(span.Ctx, st)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !toDev {
		copy(b, pin)
	}
}

func slice(t *testing.T, b buffer.Buffer, off, n int) buffer.Buffer {
	t.Helper()
	return backendtest.Slice(t, b, off, n)
}

// TestStagedPutGet: a Put from the caller's own device buffer and a Get
// into it over a TCP route (which moves host memory only: the queue pair
// stages) and an shm route (which takes device locals itself,
// DeviceLocalRoute): sizes below, at and across the chunk boundaries land
// whole, through pinned buffers only, and other bytes stay untouched.
// On the code before, both were refused with ErrNotSupported.
func TestStagedPutGet(t *testing.T) {
	for _, rk := range routeKinds {
		t.Run(rk.name, func(t *testing.T) { testStagedPutGet(t, rk.make) })
	}
}

func testStagedPutGet(t *testing.T, mk func(testing.TB, uint64) (backend.Backend, *memreg.Registry)) {
	const n = 5*stageChunk + 11
	e := newStageEnvKind(t, mk, n, nil)
	ctx := context.Background()
	devWant := make([]byte, n)
	backendtest.Random(t, devWant)
	devCopy(t, e.regA, e.dev, devWant, true)
	for _, sz := range []int{1, stageChunk - 1, stageChunk, stageChunk + 1, 2 * stageChunk, 3*stageChunk + 7, n} {
		off := (n - sz) / 2
		remWant := bytes.Clone(e.remMem)
		copy(remWant[off:off+sz], devWant[off:off+sz])
		if err := e.qp.Put(ctx, slice(t, e.dev, off, sz), slice(t, e.remote, off, sz)).Wait(ctx); err != nil {
			t.Fatalf("staged put of %d bytes: %v", sz, err)
		}
		backendtest.AssertSame(t, "peer's host buffer after a staged put", e.remMem, remWant)

		src := make([]byte, sz)
		backendtest.Random(t, src)
		copy(e.remMem[off:], src)
		copy(devWant[off:], src)
		if err := e.qp.Get(ctx, slice(t, e.dev, off, sz), slice(t, e.remote, off, sz)).Wait(ctx); err != nil {
			t.Fatalf("staged get of %d bytes: %v", sz, err)
		}
		got := make([]byte, n)
		devCopy(t, e.regA, e.dev, got, false)
		backendtest.AssertSame(t, "device buffer after a staged get", got, devWant)
	}
	if st := e.w.Stats(); st.PageableCopies != 0 || st.FailedCopies != 0 || st.CopiesDtoH == 0 || st.CopiesHtoD == 0 {
		t.Fatalf("device copies: %+v (want some each way, none unpinned or failed)", st)
	}
	// Release frees the staging buffers: no pinned range or stream of
	// theirs is left. A route that takes device locals holds its own
	// pinned buffers until it closes.
	e.qp.Release()
	if d, ok := e.route.(queuepair.DeviceLocalRoute); ok && d.TakesDeviceLocal() {
		if err := e.route.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.w.Stats(); st.LiveHost != e.base.LiveHost || st.Streams != e.base.Streams {
		t.Fatalf("after Release: %d pinned ranges, %d streams live; %d, %d before the first staged operation",
			st.LiveHost, st.Streams, e.base.LiveHost, e.base.Streams)
	}
}

// TestStagedRefusals: verbs other than Put and Get from device memory
// are refused with ErrNotSupported; a staged Put to a peer's buffer with
// a wrong key fails with ErrBadKey (its inner operation's error), and
// the queue pair serves its next operation.
func TestStagedRefusals(t *testing.T) {
	const n = 3 * stageChunk
	e := newStageEnv(t, n)
	ctx := context.Background()
	if err := e.qp.PutWithImm(ctx, e.dev, e.remote, 7).Wait(ctx); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("PutWithImm from device memory: %v, want ErrNotSupported", err)
	}
	bad := e.remote
	bad.Key[0] ^= 1
	if err := e.qp.Put(ctx, e.dev, bad).Wait(ctx); !errors.Is(err, rdmamgr.ErrBadKey) {
		t.Fatalf("staged put with a wrong key: %v, want ErrBadKey", err)
	}
	if err := e.qp.Get(ctx, e.dev, bad).Wait(ctx); !errors.Is(err, rdmamgr.ErrBadKey) {
		t.Fatalf("staged get with a wrong key: %v, want ErrBadKey", err)
	}
	want := make([]byte, n)
	backendtest.Random(t, want)
	devCopy(t, e.regA, e.dev, want, true)
	if err := e.qp.Put(ctx, e.dev, e.remote).Wait(ctx); err != nil {
		t.Fatalf("staged put after a failed one: %v", err)
	}
	backendtest.AssertSame(t, "peer's buffer", e.remMem, want)
}

// TestStagedNeighbours: staged operations run beside host ones and each
// other (more than the workers at once, queued), each with its own
// outcome: one failing does not fail the others.
func TestStagedNeighbours(t *testing.T) {
	const n = 8 * stageChunk
	e := newStageEnv(t, n)
	ctx := context.Background()
	want := make([]byte, n)
	backendtest.Random(t, want)
	devCopy(t, e.regA, e.dev, want, true)
	bad := e.remote
	bad.Key[0] ^= 1
	var wrs []*queuepair.WorkRequest
	for i := range 8 {
		part := n / 8
		r := slice(t, e.remote, i*part, part)
		if i == 3 {
			r = backendtest.Slice(t, bad, i*part, part)
		}
		wrs = append(wrs, e.qp.Put(ctx, slice(t, e.dev, i*part, part), r))
	}
	for i, w := range wrs {
		err := w.Wait(ctx)
		if (i == 3) != (err != nil) {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	part := n / 8
	copy(want[3*part:4*part], make([]byte, part))
	backendtest.AssertSame(t, "peer's buffer (but the failed part)", e.remMem, want)
}

// TestStagedCancelWaits: a staged Get cancelled while its copy to the
// device is held (the stand-in's Hold) does not report until the copies
// finished, and no byte reaches the device after the report: the number
// of copies and the device bytes stay as they were. The staging buffers
// then serve the next operation.
func TestStagedCancelWaits(t *testing.T) {
	// More chunks than a pipeline's buffers (8): it must wait for the held
	// copy before it reuses the first one.
	const n = 24 * stageChunk
	htod := make(chan struct{}, 1)
	e := newStageEnvOn(t, n, func(d *cudafake.Driver) cuda.Driver { return &queuedDriver{Driver: d, htod: htod} })
	ctx := context.Background()
	backendtest.Random(t, e.remMem)
	if err := e.qp.Get(ctx, e.dev, e.remote).Wait(ctx); err != nil { // workers made, buffers bound
		t.Fatal(err)
	}
	release := e.w.Hold()
	defer release()
	select { // the warm-up's
	case <-htod:
	default:
	}
	before := e.w.Stats()
	w := e.qp.Get(ctx, e.dev, e.remote)
	// The first inner Get lands and its copy to the device is queued,
	// held: the pipeline waits for it before it reuses its buffer, so the
	// Get cannot finish (with no more chunks than buffers every copy could
	// be queued before the cancel, and the Get would be done).
	<-htod
	cancelled := make(chan error, 1)
	go func() { cancelled <- w.Cancel() }()
	select {
	case err := <-cancelled:
		t.Fatalf("Cancel returned (%v) while a copy to the device was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	err := <-cancelled
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled get: %v, want context.Canceled", err)
	}
	after := e.w.Stats()
	got := make([]byte, n)
	devCopy(t, e.regA, e.dev, got, false)
	time.Sleep(20 * time.Millisecond)
	again := make([]byte, n)
	devCopy(t, e.regA, e.dev, again, false)
	if st := e.w.Stats(); st.CopiesHtoD != after.CopiesHtoD || !bytes.Equal(got, again) {
		t.Fatalf("device written after the cancelled get reported: copies %d -> %d", after.CopiesHtoD, st.CopiesHtoD)
	}
	if after.CopiesHtoD-before.CopiesHtoD >= n/stageChunk {
		t.Fatalf("%d copies to the device: the get was not cut short", after.CopiesHtoD-before.CopiesHtoD)
	}
	if err := e.qp.Get(ctx, e.dev, e.remote).Wait(ctx); err != nil {
		t.Fatalf("get after a cancelled one: %v", err)
	}
	devCopy(t, e.regA, e.dev, got, false)
	backendtest.AssertSame(t, "device buffer", got, e.remMem)
}

// TestStagedAllocs: a staged Put and Get of reused work requests (three
// chunks each) allocate nothing per operation once the workers and their
// buffers exist.
func TestStagedAllocs(t *testing.T) {
	if testing.Short() || queuepair.RaceEnabled {
		t.Skip("allocation count is not meaningful under -race")
	}
	e := newStageEnvOn(t, 3*stageChunk, func(d *cudafake.Driver) cuda.Driver {
		return &syncDriver{Driver: d, mem: make([]byte, 8<<20)}
	})
	ctx := context.Background()
	var w queuepair.WorkRequest
	run := func() {
		e.qp.PostPut(ctx, &w, e.dev, e.remote)
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		e.qp.PostGet(ctx, &w, e.dev, e.remote)
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		run()
	}
	a := testing.AllocsPerRun(100, run) / 2
	t.Logf("%.3f allocations per staged operation", a)
	if a != 0 {
		t.Fatalf("%.3f allocations per staged operation, want 0", a)
	}
}

// TestStagedPutCancelWaits: a staged Put cancelled while its first copy
// from the device is held does not report until that copy finished, and
// then reports context.Canceled with no byte sent: the peer's buffer is
// untouched after the report, and stays so.
func TestStagedPutCancelWaits(t *testing.T) {
	const n = 8 * stageChunk
	e := newStageEnv(t, n)
	ctx := context.Background()
	src := make([]byte, n)
	backendtest.Random(t, src)
	devCopy(t, e.regA, e.dev, src, true)
	release := e.w.Hold()
	defer release()
	w := e.qp.Put(ctx, e.dev, e.remote)
	cancelled := make(chan error, 1)
	go func() { cancelled <- w.Cancel() }()
	select {
	case err := <-cancelled:
		if err == nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled put: %v", err)
		}
		// Cancelled before its worker took it: nothing was copied.
	case <-time.After(50 * time.Millisecond):
		release()
		if err := <-cancelled; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled put: %v, want context.Canceled", err)
		}
	}
	zero := make([]byte, n)
	backendtest.AssertSame(t, "peer's buffer after the cancelled put", e.remMem, zero)
	release()
	time.Sleep(20 * time.Millisecond)
	backendtest.AssertSame(t, "peer's buffer a while after", e.remMem, zero)
	if err := e.qp.Put(ctx, e.dev, e.remote).Wait(ctx); err != nil {
		t.Fatalf("put after a cancelled one: %v", err)
	}
	backendtest.AssertSame(t, "peer's buffer", e.remMem, src)
}

// TestStagedRegistryCloses: the staging buffers do not hold the local
// registry's Close (a manager closing with a queue pair unreleased) once
// no staged operation runs; a staged operation after it fails, and the
// queue pair's Release still returns.
func TestStagedRegistryCloses(t *testing.T) {
	e := newStageEnv(t, 2*stageChunk)
	ctx := context.Background()
	if err := e.qp.Put(ctx, e.dev, e.remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := e.regA.Close(cctx); err != nil {
		t.Fatalf("registry close with staging buffers bound: %v", err)
	}
	if err := e.qp.Put(ctx, e.dev, e.remote).Wait(ctx); err == nil {
		t.Fatal("staged put after the registry closed succeeded")
	}
	e.qp.Release()
}
