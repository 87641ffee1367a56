package backendtest

import (
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
)

// RunDevice is the suite's variant with buffers in device memory (GPU
// buffers, memreg.AllocateAt) on either side, against the driver's
// in-memory stand-in (cudafake: A and B are two processes of one fake
// host, each with one device). No backend moves device memory yet (issue
// 27: TCP staging, shm CUDA IPC and ibverbs dma-buf are later work), so
// what it asserts is the refusal: every operation on a peer's device
// buffer fails with rdmamgr.ErrNotSupported and touches none of its
// bytes, the route keeps serving host memory (or, on RDMA, fails as after
// any remote error), and no work request can carry a local device buffer
// (its local reference is refused with ErrNotSupported: queuepair never
// hands one to a backend). The checks of the device data path itself
// (GPU->GPU, GPU->host, host->GPU) go here once a backend moves it.
func RunDevice(t *testing.T, f Factory) {
	f = f.withDefaults(t)
	p := NewPair(t, f)
	w := cudafake.NewWorld(cudafake.Config{DeviceMemory: 64 << 20})
	da, db := w.Process(), w.Process()
	t.Cleanup(func() { da.Close(); db.Close() })
	p.RegA.SetCUDA(da, nil)
	p.RegB.SetCUDA(db, nil)
	const n = 64 << 10

	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	Random(t, la)
	hb, err := p.RegB.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite|buffer.AccessAtomic|buffer.AccessNotify)
	if err != nil {
		t.Fatal(err)
	}
	da0, err := p.RegA.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	copies := w.Stats().CopiesHtoD + w.Stats().CopiesDtoH + w.Stats().CopiesDtoD

	ops := []backend.Op{backend.OpWrite, backend.OpRead}
	if f.Verbs {
		ops = append(ops, backend.OpWriteImm, backend.OpCompareSwap, backend.OpFetchAdd)
	}
	for _, op := range ops {
		if f.Verbs && !carries(p.A, op) {
			continue
		}
		remote := hb
		if op.Atomic() {
			remote = Slice(t, hb, 0, 8)
		}
		_, err := DoVerb(t, f.Timeout, p.Route, p.RegA, op, ha, remote, Operands{Imm: 7, Swap: 1})
		if !errors.Is(err, rdmamgr.ErrNotSupported) && (p.f.RouteSurvivesRemoteError || err == nil) {
			t.Fatalf("%v to a peer's device buffer: %v, want rdmamgr.ErrNotSupported", op, err)
		}
		t.Logf("%v to a peer's device buffer: %v", op, err)
		p.afterRemoteError(t, p.Route)
		if !p.f.RouteSurvivesRemoteError {
			p.Route = p.NewRoute(t) // an RC queue pair fails after a remote error
		}
	}
	// No byte of the device buffer was touched: it reads as the pool left it.
	ref, err := p.RegB.AcquireLocalAny(&hb)
	if err != nil {
		t.Fatal(err)
	}
	span, _ := ref.Device()
	got := make([]byte, n)
	st, _ := span.Driver.StreamCreate(span.Ctx)
	if err := span.Driver.CopyDtoH(span.Ctx, got, span.Ptr, st); err != nil {
		t.Fatal(err)
	}
	if err := span.Driver.StreamSynchronize(span.Ctx, st); err != nil {
		t.Fatal(err)
	}
	span.Driver.StreamDestroy(span.Ctx, st)
	ref.Release()
	for i, c := range got {
		if c != 0 {
			t.Fatalf("device buffer byte %d = %#x after refused operations", i, c)
		}
	}
	if w.Stats().CopiesHtoD+w.Stats().CopiesDtoH+w.Stats().CopiesDtoD != copies+1 { // ours
		t.Fatalf("a backend copied device memory: %+v", w.Stats())
	}

	// A local device buffer never reaches a backend.
	if _, err := p.RegA.AcquireLocal(da0); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("local reference to a device buffer: %v, want rdmamgr.ErrNotSupported", err)
	}
	lr := p.RegA.NewLocalRun(nil)
	if _, err := lr.Acquire(&da0, 2); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("local run of a device buffer: %v, want rdmamgr.ErrNotSupported", err)
	}
	lr.Close()
	p.checkWorks(t)
}

// carries reports whether b's routes carry op (backend.Capabilities).
func carries(b backend.Backend, op backend.Op) bool {
	c, ok := b.(backend.Capabilities)
	if !ok {
		return true
	}
	return c.Supports(op)
}
