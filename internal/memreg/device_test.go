package memreg

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
)

// newDevReg is a registry with a fake CUDA process of 2 devices.
func newDevReg(t *testing.T, lim buffer.Limits) (*Registry, *cudafake.World) {
	t.Helper()
	w := cudafake.NewWorld(cudafake.Config{Devices: 2, DeviceMemory: 64 << 20})
	d := w.Process()
	t.Cleanup(func() { d.Close() })
	g := newReg(t, lim)
	g.SetCUDA(d, nil)
	return g, w
}

func mustAllocAt(t *testing.T, g *Registry, loc buffer.Location, size uint64, a buffer.Access) buffer.Buffer {
	t.Helper()
	b, err := g.AllocateAt(loc, size, a)
	if err != nil {
		t.Fatalf("AllocateAt(%v, %d): %v", loc, size, err)
	}
	return b
}

// devWrite and devRead copy through a Ref's device span and wait.
func devCopy(t *testing.T, s DeviceSpan, host []byte, toDevice bool) {
	t.Helper()
	st, err := s.Driver.StreamCreate(s.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Driver.StreamDestroy(s.Ctx, st)
	if toDevice {
		err = s.Driver.CopyHtoD(s.Ctx, s.Ptr, host, st)
	} else {
		err = s.Driver.CopyDtoH(s.Ctx, host, s.Ptr, st)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Driver.StreamSynchronize(s.Ctx, st); err != nil {
		t.Fatal(err)
	}
}

// TestDeviceRegion: a device region's handle says where it is, its Refs
// reach device memory (never host bytes), and paths that move host memory
// only refuse it with ErrNotSupported after the checks every region gets.
func TestDeviceRegion(t *testing.T) {
	g, w := newDevReg(t, buffer.Limits{})
	b := mustAllocAt(t, g, buffer.CUDA(1), 10000, buffer.AccessReadWrite)
	if b.Location != buffer.CUDA(1) || b.Length != 10000 || b.RDMA != (buffer.RDMAKey{}) {
		t.Fatalf("handle %v: location %v, rdma %v", b, b.Location, b.RDMA)
	}
	if st := w.Stats(); st.LiveAllocs != 1 { // one slab
		t.Fatalf("device allocations %d, want 1 slab", st.LiveAllocs)
	}
	ref, err := g.AcquireRemoteAny(b.Region, b.Key, 100, 50, buffer.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := ref.Device()
	if !ok || ref.Bytes() != nil || ref.Len() != 50 || s.Len != 50 || s.Dev != 1 {
		t.Fatalf("Ref.Device = %+v, %v; Bytes %v, Len %d", s, ok, ref.Bytes(), ref.Len())
	}
	devCopy(t, s, []byte(strings.Repeat("x", 50)), true)
	ref.Release()
	lref, err := g.AcquireLocalAny(&b)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := lref.Device()
	got := make([]byte, 10000)
	devCopy(t, ls, got, false)
	lref.Release()
	for i, c := range got {
		want := byte(0) // zeroed by the pool, the driver does not
		if i >= 100 && i < 150 {
			want = 'x'
		}
		if c != want {
			t.Fatalf("byte %d = %#x, want %#x", i, c, want)
		}
	}

	// Host-only paths: the usual checks first, then ErrNotSupported.
	_, err = g.AcquireRemote(b.Region, buffer.Key{}, 0, 1, buffer.AccessRead)
	wantErr(t, "wrong key", err, rdmamgr.ErrBadKey)
	_, err = g.AcquireRemote(b.Region, b.Key, 0, 1, buffer.AccessAtomic)
	wantErr(t, "no atomic access", err, rdmamgr.ErrAccess)
	_, err = g.AcquireRemote(b.Region, b.Key, 9999, 2, buffer.AccessRead)
	wantErr(t, "out of range", err, rdmamgr.ErrOutOfRange)
	_, err = g.AcquireRemoteAny(b.Region, b.Key, 9999, 2, buffer.AccessRead)
	wantErr(t, "out of range (any)", err, rdmamgr.ErrOutOfRange)
	_, err = g.AcquireRemote(b.Region, b.Key, 0, 1, buffer.AccessRead)
	wantErr(t, "host-only remote", err, rdmamgr.ErrNotSupported)
	_, err = g.AcquireLocal(b)
	wantErr(t, "host-only local", err, rdmamgr.ErrNotSupported)
	_, err = g.Bytes(b)
	wantErr(t, "Bytes", err, rdmamgr.ErrNotSupported)
	lr := g.NewLocalRun(nil)
	_, err = lr.Acquire(&b, 4)
	wantErr(t, "LocalRun", err, rdmamgr.ErrNotSupported)
	lr.Close()

	if err := g.Release(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if st := g.Stats(); !idle(st) {
		t.Fatalf("after release: %+v", st)
	}
}

// TestDeviceRevokeAndReleaseWait: Revoke returns only once no remote Ref
// of a device region is held, and Release only once no Ref at all is;
// the memory goes back to the pool then, zeroed for the next owner.
func TestDeviceRevokeAndReleaseWait(t *testing.T) {
	g, _ := newDevReg(t, buffer.Limits{})
	b := mustAllocAt(t, g, buffer.CUDA(0), 4096, buffer.AccessReadWrite)
	ref, err := g.AcquireRemoteAny(b.Region, b.Key, 0, 4096, buffer.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	span, _ := ref.Device()
	devCopy(t, span, []byte(strings.Repeat("s", 4096)), true)
	revoked := make(chan error, 1)
	go func() { revoked <- g.Revoke(context.Background(), b) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-revoked:
		t.Fatalf("Revoke returned (%v) while a remote Ref was held", err)
	default:
	}
	_, err = g.AcquireRemoteAny(b.Region, b.Key, 0, 1, buffer.AccessRead)
	wantErr(t, "after revoke", err, rdmamgr.ErrRevoked)
	ref.Release()
	if err := <-revoked; err != nil {
		t.Fatal(err)
	}

	local, err := g.AcquireLocalAny(&b) // the owner's use outlives revocation
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- g.Release(context.Background(), b) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-released:
		t.Fatalf("Release returned (%v) while a local Ref was held", err)
	default:
	}
	local.Release()
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	// The slot is reused, and shows nothing of its previous owner.
	b2 := mustAllocAt(t, g, buffer.CUDA(0), 4096, buffer.AccessReadWrite)
	ref2, err := g.AcquireLocalAny(&b2)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := ref2.Device()
	if s2.Ptr != span.Ptr {
		t.Logf("slot not reused (%#x, was %#x)", s2.Ptr, span.Ptr)
	}
	got := make([]byte, 4096)
	devCopy(t, s2, got, false)
	ref2.Release()
	for i, c := range got {
		if c != 0 {
			t.Fatalf("reused device memory byte %d = %#x, want 0", i, c)
		}
	}
}

// TestDeviceLeaseAndLimits: a lease ends remote access to device memory
// as to host memory, and device bytes count against Limits.
func TestDeviceLeaseAndLimits(t *testing.T) {
	g, _ := newDevReg(t, buffer.Limits{MaxBytes: 1 << 20, MaxRegions: 4})
	b := mustAllocAt(t, g, buffer.CUDA(0), 1<<19, buffer.AccessRead)
	if err := g.SetLease(b, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	_, err := g.AcquireRemoteAny(b.Region, b.Key, 0, 1, buffer.AccessRead)
	wantErr(t, "lease ran out", err, rdmamgr.ErrExpired)
	_, err = g.AllocateAt(buffer.CUDA(0), 1<<19+1, buffer.AccessRead)
	wantErr(t, "over MaxBytes", err, rdmamgr.ErrLimit)
	if st := g.Stats(); st.Bytes != 1<<19 || st.Regions != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDeviceNoDriver: without a driver (or past the last device) a
// device request fails with ErrNotSupported saying why, and holds nothing.
func TestDeviceNoDriver(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	_, err := g.AllocateAt(buffer.CUDA(0), 4096, buffer.AccessRead)
	wantErr(t, "no driver", err, rdmamgr.ErrNotSupported)
	_, err = cuda.Open() // no GPU here: ErrNotSupported naming why
	if err == nil {
		t.Skip("a CUDA driver is present")
	}
	g.SetCUDA(nil, err)
	_, err2 := g.AllocateAt(buffer.CUDA(0), 4096, buffer.AccessRead)
	wantErr(t, "no driver, with the reason", err2, rdmamgr.ErrNotSupported)
	if !strings.Contains(err2.Error(), err.Error()) {
		t.Errorf("error %q does not say why (%q)", err2, err)
	}
	g2, _ := newDevReg(t, buffer.Limits{})
	_, err = g2.AllocateAt(buffer.CUDA(2), 4096, buffer.AccessRead)
	wantErr(t, "device 2 of 2", err, rdmamgr.ErrNotSupported)
	_, err = g2.AllocateAt(buffer.Location(99), 4096, buffer.AccessRead)
	wantErr(t, "unknown location", err, rdmamgr.ErrInvalid)
	if st := g.Stats(); !idle(st) {
		t.Fatalf("%+v", st)
	}
	if st := g2.Stats(); !idle(st) {
		t.Fatalf("%+v", st)
	}
}

// countHooks counts hook calls.
type countHooks struct{ reg, dereg int }

func (h *countHooks) RegisterRegion(*Region) error   { h.reg++; return nil }
func (h *countHooks) DeregisterRegion(*Region) error { h.dereg++; return nil }

// TestDeviceSkipsHooksAndClose: no backend hook sees a device region (no
// backend registers device memory with hardware); Close frees the
// device memory once the last device region drained.
func TestDeviceSkipsHooksAndClose(t *testing.T) {
	w := cudafake.NewWorld(cudafake.Config{})
	d := w.Process()
	defer d.Close()
	g := NewRegistry(testOwner, buffer.Limits{})
	h := &countHooks{}
	g.AddHooks(h)
	g.SetCUDA(d, nil)
	b := mustAllocAt(t, g, buffer.CUDA(0), 3<<20, buffer.AccessRead) // an allocation of its own
	mustAllocAt(t, g, buffer.CUDA(0), 100, buffer.AccessRead)        // a slot
	if h.reg != 0 {
		t.Fatalf("hooks saw %d device regions", h.reg)
	}
	ref, err := g.AcquireLocalAny(&b)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	err = g.Close(ctx) // a Ref is held: the region is freed once it drains
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a Ref held: %v", err)
	}
	if st := w.Stats(); st.LiveAllocs == 0 {
		t.Fatalf("device memory freed under a held Ref")
	}
	ref.Release()
	eventually(t, "device memory freed after the last Ref", func() bool { return w.Stats().LiveAllocs == 0 })
	if h.dereg != 0 {
		t.Fatalf("hooks deregistered %d device regions", h.dereg)
	}
	_, err = g.AllocateAt(buffer.CUDA(0), 1, buffer.AccessRead)
	wantErr(t, "after Close", err, rdmamgr.ErrClosed)
}
