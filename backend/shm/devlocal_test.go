//go:build linux

package shm_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// devLocalWR is a work request whose local side is device buffer local of
// reg, as a queue pair hands it to a route that takes device locals.
func devLocalWR(t *testing.T, reg *memreg.Registry, op backend.Op, local, remote buffer.Buffer, done backend.Completer) (*backend.WorkRequest, func()) {
	t.Helper()
	ref, err := reg.AcquireLocalAny(&local)
	if err != nil {
		t.Fatal(err)
	}
	span, ok := ref.Device()
	if !ok {
		t.Fatal("not device memory")
	}
	return &backend.WorkRequest{Op: op, LocalRegion: &span, Remote: remote, Deadline: time.Now().Add(timeout), Done: done}, ref.Release
}

// doDevLocal runs one device-local operation on the pair's route.
func (p *pair) doDevLocal(t *testing.T, op backend.Op, local, remote buffer.Buffer) error {
	t.Helper()
	rec := backendtest.NewRecorder(1)
	wr, release := devLocalWR(t, p.regA, op, local, remote, rec)
	defer release()
	if err := p.route.Post(wr); err != nil {
		return err
	}
	select {
	case res := <-rec.Results():
		return res.Err
	case <-time.After(timeout):
		t.Fatal("no completion")
		return nil
	}
}

// setDevice writes data into device buffer h of reg.
func setDevice(t *testing.T, reg *memreg.Registry, h buffer.Buffer, data []byte) {
	t.Helper()
	ref, err := reg.AcquireLocalAny(&h)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	span, _ := ref.Device()
	d := span.Driver
	pinned, err := d.HostAlloc(span.Ctx, span.Len)
	if err != nil {
		t.Fatal(err)
	}
	defer d.HostFree(span.Ctx, pinned)
	copy(pinned, data)
	st, err := d.StreamCreate(span.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.StreamDestroy(span.Ctx, st)
	if err := d.CopyHtoD(span.Ctx, span.Ptr, pinned, st); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamSynchronize(span.Ctx, st); err != nil {
		t.Fatal(err)
	}
}

// TestDeviceLocal: a Put from and a Get into the caller's own device
// memory, handed to the route as is (TakesDeviceLocal), move every byte
// to and from a peer's device region opened through IPC (device to
// device, no host copy), a peer's memfd-backed host region (through the
// route's pinned buffers) and a peer's pooled device region on the
// fallback (one inner operation per chunk); access is checked, and
// atomics from device memory are refused with ErrNotSupported.
func TestDeviceLocal(t *testing.T) {
	p, w := devPair(t)
	if !p.route.(interface{ TakesDeviceLocal() bool }).TakesDeviceLocal() {
		t.Fatal("the route does not take device locals with a driver")
	}
	const n = 3<<20 + 5
	src, err := p.regA.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := p.regA.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, n)
	backendtest.Random(t, data)
	setDevice(t, p.regA, src, data)

	peerDev, err := p.regB.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	peerHost, hostBytes := backendtest.Alloc(t, p.regB, n, buffer.AccessReadWrite)
	const small = 700<<10 + 3
	peerPooled, err := p.regB.AllocateAt(buffer.CUDA(0), small, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		remote buffer.Buffer
		size   int
		read   func() []byte
	}{
		{"ipc", peerDev, n, func() []byte { return deviceBytes(t, p.regB, peerDev) }},
		{"host", peerHost, n, func() []byte { return hostBytes }},
		{"fallback", peerPooled, small, func() []byte { return deviceBytes(t, p.regB, peerPooled) }},
	} {
		before, fbBefore := w.Stats(), fallbackOps(p)
		from, _ := src.Slice(0, uint64(tc.size))
		if err := p.doDevLocal(t, backend.OpWrite, from, tc.remote); err != nil {
			t.Fatalf("%s: put from device memory: %v", tc.name, err)
		}
		backendtest.AssertSame(t, tc.name+": peer after a put from device memory", tc.read(), data[:tc.size])
		setDevice(t, p.regA, dst, make([]byte, n))
		into, _ := dst.Slice(0, uint64(tc.size))
		if err := p.doDevLocal(t, backend.OpRead, into, tc.remote); err != nil {
			t.Fatalf("%s: get into device memory: %v", tc.name, err)
		}
		backendtest.AssertSame(t, tc.name+": device memory after a get", deviceBytes(t, p.regA, dst)[:tc.size], data[:tc.size])
		after := w.Stats()
		if onFallback := fallbackOps(p) > fbBefore; onFallback != (tc.name == "fallback") {
			t.Fatalf("%s: went to the fallback: %v", tc.name, onFallback)
		}
		if tc.name == "ipc" && (after.CopiesDtoD == before.CopiesDtoD || after.CopiesHtoD-before.CopiesHtoD > 2 || after.CopiesDtoH-before.CopiesDtoH > 2) {
			t.Fatalf("ipc: copies %+v -> %+v: want device to device only (the tests' own reads aside)", before, after)
		}
	}
	if opens, _ := shm.RoutePaths(p.route); opens != 1 {
		t.Fatalf("IPC opens %d, want 1", opens)
	}
	// A chain mixing host and device locals (PostList).
	ha, la := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, la)
	rec2 := backendtest.NewRecorder(2)
	w1, r1 := backendtest.NewWR(t, p.regA, backend.OpWrite, ha, backendtest.Slice(t, peerHost, 0, 4096), time.Now().Add(timeout), rec2)
	defer r1()
	from2, _ := src.Slice(4096, 4096)
	w2, r2 := devLocalWR(t, p.regA, backend.OpWrite, from2, backendtest.Slice(t, peerHost, 4096, 4096), rec2)
	defer r2()
	if n, err := p.route.(backend.ListPoster).PostList([]*backend.WorkRequest{w1, w2}); n != 2 || err != nil {
		t.Fatalf("PostList: %d, %v", n, err)
	}
	for range 2 {
		if res := <-rec2.Results(); res.Err != nil {
			t.Fatalf("PostList's op: %v", res.Err)
		}
	}
	backendtest.AssertSame(t, "peer host after a chain", hostBytes[:8192], append(append([]byte(nil), la...), data[4096:8192]...))

	word, _ := peerDev.Slice(0, 8)
	from, _ := src.Slice(0, 8)
	rec := backendtest.NewRecorder(1)
	wr, release := devLocalWR(t, p.regA, backend.OpCompareSwap, from, word, rec)
	defer release()
	if err := p.route.Post(wr); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("compare-swap from device memory: %v, want ErrNotSupported", err)
	}
	if st := w.Stats(); st.PageableCopies != 0 || st.FailedCopies != 0 {
		t.Fatalf("fake driver: %+v", st)
	}
}

// fallbackOps returns the operations the pair's fallback route counted.
func fallbackOps(p *pair) uint64 {
	_, n := shm.RoutePaths(p.route)
	return n
}

// awaitInFlight waits until the pair's backend counts a copy in flight
// (the put just posted), failing the test if it never does.
func (p *pair) awaitInFlight(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(timeout); p.b.InFlight() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the put never counted itself in flight")
		}
	}
}
