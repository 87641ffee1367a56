package actor

import (
	"bytes"
	crand "crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// TestDeviceBuffer: WithDevice gets a buffer in device memory (the
// handle says where), released and revoked like any other; without a
// driver it is refused with ErrNotSupported saying why; an unknown
// location in the request is refused with ErrInvalid.
func TestDeviceBuffer(t *testing.T) {
	ctx := testCtx(t)
	sys := newSystem(t)
	w := cudafake.NewWorld(cudafake.Config{Devices: 2})
	d := w.Process()
	t.Cleanup(func() { d.Close() })
	m := startManager(t, sys, Config{Name: "gpu"})
	none := startManager(t, sys, Config{Name: "nogpu"})
	m.SetCUDA(d, nil)
	none.SetCUDA(nil, errors.New("libcuda.so.1: cannot open shared object file"))

	b, err := m.Client().RequestBuffer(ctx, 8192, buffer.AccessReadWrite, WithDevice(buffer.CUDA(1)), WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if b.Location != buffer.CUDA(1) || b.Length != 8192 || b.Lease != time.Minute {
		t.Fatalf("handle %v, location %v, lease %v", b, b.Location, b.Lease)
	}
	if w.Stats().LiveAllocs == 0 {
		t.Fatal("no device memory allocated")
	}
	if _, err := m.Bytes(b); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("Bytes of device memory: %v, want ErrNotSupported", err)
	}
	if err := m.Client().RevokeBuffer(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := m.Client().ReleaseBuffer(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := m.Client().ReleaseBuffer(ctx, b); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("second release: %v", err)
	}

	_, err = none.Client().RequestBuffer(ctx, 8192, buffer.AccessReadWrite, WithDevice(buffer.CUDA(0)))
	if !errors.Is(err, rdmamgr.ErrNotSupported) || !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Fatalf("no driver: %v, want ErrNotSupported naming why", err)
	}
	_, err = m.Client().RequestBuffer(ctx, 8192, buffer.AccessReadWrite, WithDevice(buffer.CUDA(2)))
	if !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("device 2 of 2: %v, want ErrNotSupported", err)
	}
	_, err = m.Client().RequestBuffer(ctx, 8, buffer.AccessRead, WithDevice(buffer.CUDA(0)), WithMemory(make([]byte, 8)))
	if !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("device memory in place: %v, want ErrNotSupported", err)
	}
	_, err = m.Client().RequestBuffer(ctx, 8, buffer.AccessRead, WithDevice(buffer.Location(1000)))
	if !errors.Is(err, rdmamgr.ErrInvalid) {
		t.Fatalf("invalid location: %v, want ErrInvalid", err)
	}
	// A raw request naming no known location (the client refuses to send one).
	r := ask(t, sys, m.PID(), &rdmapb.RequestBuffer{Size: 8, Access: uint32(buffer.AccessRead), Location: 1 << 20})
	resp, ok := r.(*rdmapb.RequestBufferResponse)
	if !ok || resp.Buffer != nil || !errors.Is(toError(resp.Error), rdmamgr.ErrInvalid) {
		t.Fatalf("raw request at location 1<<20: %v", r)
	}
	if st := m.reg.Stats(); st.Regions != 0 {
		t.Fatalf("regions left: %+v", st)
	}
}

// TestDeviceBufferOverTCP: a peer's GPU buffer is written and read over
// TCP (its owner stages it); a local GPU buffer is read into from the
// peer's GPU buffer and written from into a peer's host buffer (the queue
// pair stages it, queuepair/stage.go).
func TestDeviceBufferOverTCP(t *testing.T) {
	ctx := testCtx(t)
	sys, a, b := newPair(t)
	w := cudafake.NewWorld(cudafake.Config{})
	da, db := w.Process(), w.Process()
	t.Cleanup(func() { da.Close(); db.Close() })
	a.SetCUDA(da, nil)
	b.SetCUDA(db, nil)
	const n = 2<<20 + 3
	local := requestBuf(t, ctx, a.Client(), n, buffer.AccessReadWrite)
	remote, err := NewClient(sys, b.PID()).RequestBuffer(ctx, n, buffer.AccessReadWrite, WithDevice(buffer.CUDA(0)))
	if err != nil {
		t.Fatal(err)
	}
	qp := requestQP(t, ctx, a, b.PID())
	src := mustBytes(t, a, local)
	crand.Read(src)
	want := bytes.Clone(src)
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	clear(src)
	if err := qp.Get(ctx, local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, want) {
		t.Fatal("put then get through a peer's device memory: bytes differ")
	}
	if st := w.Stats(); st.CopiesHtoD == 0 || st.CopiesDtoH == 0 || st.PageableCopies != 0 {
		t.Fatalf("device copies %+v", st)
	}
	gpu, err := a.Client().RequestBuffer(ctx, n, buffer.AccessReadWrite, WithDevice(buffer.CUDA(0)))
	if err != nil {
		t.Fatal(err)
	}
	// GPU to GPU: the local device buffer staged by the queue pair, the
	// peer's by its owner; then out of it into a host buffer of the peer.
	if err := qp.Get(ctx, gpu, remote).Wait(ctx); err != nil {
		t.Fatalf("get into a local device buffer: %v", err)
	}
	host := requestBuf(t, ctx, b.Client(), n, buffer.AccessReadWrite)
	if err := qp.Put(ctx, gpu, host).Wait(ctx); err != nil {
		t.Fatalf("put from a local device buffer: %v", err)
	}
	if got := mustBytes(t, b, host); !bytes.Equal(got, want) {
		t.Fatal("get into a local device buffer, then put from it: bytes differ")
	}
	if st := w.Stats(); st.PageableCopies != 0 || st.FailedCopies != 0 {
		t.Fatalf("device copies %+v", st)
	}
	if err := NewClient(sys, b.PID()).ReleaseBuffer(ctx, remote); err != nil {
		t.Fatal(err)
	}
}

// TestDeviceBufferOutOfMemory: a peer's device out of memory reaches a
// RequestBuffer caller as ErrLimit (RESOURCE_EXHAUSTED on the wire), as
// the owner's other memory caps, not as an internal error; the owner
// keeps serving.
func TestDeviceBufferOutOfMemory(t *testing.T) {
	ctx := testCtx(t)
	sys, _, b := newPair(t)
	w := cudafake.NewWorld(cudafake.Config{DeviceMemory: 4 << 20})
	db := w.Process()
	t.Cleanup(func() { db.Close() })
	b.SetCUDA(db, nil)
	c := NewClient(sys, b.PID())
	_, err := c.RequestBuffer(ctx, 8<<20, buffer.AccessReadWrite, WithDevice(buffer.CUDA(0)))
	if !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("device out of memory: %v, want ErrLimit", err)
	}
	h, err := c.RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite, WithDevice(buffer.CUDA(0)))
	if err != nil {
		t.Fatalf("a request that fits, after: %v", err)
	}
	if err := c.ReleaseBuffer(ctx, h); err != nil {
		t.Fatal(err)
	}
}
