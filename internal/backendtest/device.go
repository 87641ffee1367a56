package backendtest

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// RunDevice is the suite's variant with buffers in device memory (GPU
// buffers, memreg.AllocateAt) on either side, against the driver's
// in-memory stand-in (cudafake: A and B are two processes of one fake
// host, each with one device). Where Factory.DeviceRemote says the
// backend moves WRITEs and READs of a peer's device memory (TCP stages it
// through pinned buffers), Puts and Gets between A's host memory and B's
// device memory move every byte, at sizes across the staging chunks and
// the frames, and the capability checks hold as for host memory (key,
// access, revocation); PutWithImm and the atomics on device memory are
// refused with rdmamgr.ErrNotSupported, touching nothing. Elsewhere
// every operation on a peer's device buffer is refused so. Either way the
// route keeps serving host memory (or, on RDMA, fails as after any remote
// error), and no work request carries a local device buffer (its local
// reference is refused with ErrNotSupported: queuepair never hands one
// to such a backend: it stages it, queuepair/stage.go).
func RunDevice(t *testing.T, f Factory) {
	f = f.withDefaults(t)
	p := NewPair(t, f)
	w := cudafake.NewWorld(cudafake.Config{DeviceMemory: 64 << 20})
	da, db := w.Process(), w.Process()
	t.Cleanup(func() { da.Close(); db.Close() })
	p.RegA.SetCUDA(da, nil)
	p.RegB.SetCUDA(db, nil)
	const n = 3<<20 + 5 // frames of 1 MiB, chunks of 256 KiB: neither divides it

	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	Random(t, la)
	hb, err := p.RegB.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite|buffer.AccessAtomic|buffer.AccessNotify)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, n) // what hb holds
	if f.DeviceRemote {
		for _, sz := range []int{1, 4095, 256<<10 + 3, 1<<20 + 17, n} {
			off := (n - sz) / 3
			src, dst := Slice(t, ha, 0, sz), Slice(t, hb, off, sz)
			Random(t, la[:sz])
			if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, src, dst); err != nil {
				t.Fatalf("put of %d bytes to a peer's device buffer: %v", sz, err)
			}
			copy(want[off:], la[:sz])
			AssertSame(t, "device buffer after a put", readDevice(t, p.RegB, hb), want)
			clear(la[:sz])
			if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpRead, src, dst); err != nil {
				t.Fatalf("get of %d bytes from a peer's device buffer: %v", sz, err)
			}
			AssertSame(t, "host buffer after a get from device memory", la[:sz], want[off:off+sz])
		}
		bad := hb
		bad.Key[0] ^= 1
		if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, Slice(t, ha, 0, 64), Slice(t, bad, 0, 64)); !errors.Is(err, f.WrongKeyErr) {
			t.Fatalf("put with a wrong key to device memory: %v, want %v", err, f.WrongKeyErr)
		}
		p.afterRemoteError(t, p.Route)
		ro, err := p.RegB.AllocateAt(buffer.CUDA(0), 4096, buffer.AccessRead)
		if err != nil {
			t.Fatal(err)
		}
		if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpWrite, Slice(t, ha, 0, 4096), ro); !errors.Is(err, rdmamgr.ErrAccess) {
			t.Fatalf("put to read-only device memory: %v, want rdmamgr.ErrAccess", err)
		}
		AssertSame(t, "read-only device buffer after a refused put", readDevice(t, p.RegB, ro), make([]byte, 4096))
		p.afterRemoteError(t, p.Route)
	}
	ops := []backend.Op{backend.OpWrite, backend.OpRead}
	if f.DeviceRemote {
		ops = nil
	}
	if f.Verbs {
		ops = append(ops, backend.OpWriteImm, backend.OpCompareSwap, backend.OpFetchAdd)
	}
	for _, op := range ops {
		if f.Verbs && !carries(p.A, op) {
			continue
		}
		remote := Slice(t, hb, 0, 4096)
		if op.Atomic() {
			remote = Slice(t, hb, 0, 8)
		}
		_, err := DoVerb(t, f.Timeout, p.Route, p.RegA, op, Slice(t, ha, 0, 4096), remote, Operands{Imm: 7, Swap: 1})
		if !errors.Is(err, rdmamgr.ErrNotSupported) && (p.f.RouteSurvivesRemoteError || err == nil) {
			t.Fatalf("%v to a peer's device buffer: %v, want rdmamgr.ErrNotSupported", op, err)
		}
		t.Logf("%v to a peer's device buffer: %v", op, err)
		p.afterRemoteError(t, p.Route)
		if !p.f.RouteSurvivesRemoteError {
			p.Route = p.NewRoute(t) // an RC queue pair fails after a remote error
		}
	}
	AssertSame(t, "device buffer after refused operations", readDevice(t, p.RegB, hb), want)

	// Revocation and release hold for device memory as for host memory.
	if f.DeviceRemote {
		if err := p.RegB.Revoke(context.Background(), hb); err != nil {
			t.Fatal(err)
		}
		if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpRead, Slice(t, ha, 0, 64), Slice(t, hb, 0, 64)); !errors.Is(err, f.RevokedErr) {
			t.Fatalf("get from revoked device memory: %v, want %v", err, f.RevokedErr)
		}
		p.afterRemoteError(t, p.Route)
	}

	// A local device buffer never reaches a backend.
	da0, err := p.RegA.AllocateAt(buffer.CUDA(0), 4096, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.RegA.AcquireLocal(da0); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("local reference to a device buffer: %v, want rdmamgr.ErrNotSupported", err)
	}
	lr := p.RegA.NewLocalRun(nil)
	if _, err := lr.Acquire(&da0, 2); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("local run of a device buffer: %v, want rdmamgr.ErrNotSupported", err)
	}
	lr.Close()
	p.checkWorks(t)
	if st := w.Stats(); st.PageableCopies != 0 || st.FailedCopies != 0 {
		t.Fatalf("device copies through unpinned memory or failed: %+v", st)
	}
}

// readDevice returns the bytes of device buffer h of reg (through a
// pinned buffer of the stand-in).
func readDevice(t testing.TB, reg *memreg.Registry, h buffer.Buffer) []byte {
	t.Helper()
	ref, err := reg.AcquireLocalAny(&h)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	span, _ := ref.Device()
	d := span.Driver
	got, err := d.HostAlloc(span.Ctx, span.Len)
	if err != nil {
		t.Fatal(err)
	}
	defer d.HostFree(span.Ctx, got)
	st, err := d.StreamCreate(span.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.StreamDestroy(span.Ctx, st)
	if err := d.CopyDtoH(span.Ctx, got, span.Ptr, st); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamSynchronize(span.Ctx, st); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(got)
}

// carries reports whether b's routes carry op (backend.Capabilities).
func carries(b backend.Backend, op backend.Op) bool {
	c, ok := b.(backend.Capabilities)
	if !ok {
		return true
	}
	return c.Supports(op)
}
