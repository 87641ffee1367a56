//go:build linux

package shm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// TestDeviceLocalPinned: a Put from and a Get into the caller's own device
// memory of at least 1 MiB, to and from a peer's memfd-backed host region,
// go straight between the device and the mapping once the route has
// page-locked it (devpin.go): one copy per 4 MiB, none pageable, every
// byte where it belongs; the mapping is registered once for its regions
// and unregistered when the route lets it go. A small operation keeps the
// route's pinned buffers.
func TestDeviceLocalPinned(t *testing.T) {
	p, w := devPair(t)
	const n = 9<<20 + 7 // three chunks of 4 MiB
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
	before := w.Stats().LiveHost
	peer, peerBytes := backendtest.Alloc(t, p.regB, n, buffer.AccessReadWrite)
	base := w.Stats().LiveHost
	if owner := base - before; owner != 0 {
		t.Fatalf("the owner's region of %d bytes: %d host ranges registered at allocation, want none (memreg.PinHost pins on a device copy)", n, owner)
	}

	// Small first: the route's device (its Stager's two pinned buffers),
	// and no registration of the mapping.
	from, _ := src.Slice(0, 4096)
	if err := p.doDevLocal(t, backend.OpWrite, from, backendtest.Slice(t, peer, 0, 4096)); err != nil {
		t.Fatal(err)
	}
	backendtest.AssertSame(t, "peer after a small put", peerBytes[:4096], data[:4096])
	st := w.Stats()
	stager := st.LiveHost - base
	if stager != 2 {
		t.Fatalf("host ranges after a small put: %d more, want the Stager's 2", stager)
	}

	for round := range 2 {
		before := w.Stats()
		if err := p.doDevLocal(t, backend.OpWrite, src, peer); err != nil {
			t.Fatalf("round %d: put: %v", round, err)
		}
		backendtest.AssertSame(t, "peer after a put from device memory", peerBytes, data)
		setDevice(t, p.regA, dst, make([]byte, n))
		mid := w.Stats()
		if err := p.doDevLocal(t, backend.OpRead, dst, peer); err != nil {
			t.Fatalf("round %d: get: %v", round, err)
		}
		backendtest.AssertSame(t, "device memory after a get", deviceBytes(t, p.regA, dst), data)
		after := w.Stats()
		if d := mid.CopiesDtoH - before.CopiesDtoH; d != 3 {
			t.Fatalf("round %d: put: %d device-to-host copies, want 3 (straight, 4 MiB each)", round, d)
		}
		if d := after.CopiesHtoD - mid.CopiesHtoD; d != 3 {
			t.Fatalf("round %d: get: %d host-to-device copies, want 3 (straight, 4 MiB each)", round, d)
		}
		if live := after.LiveHost - base; live != stager+1 {
			t.Fatalf("round %d: host ranges %d more, want the Stager's and the mapping's (%d)", round, live, stager+1)
		}
	}
	if st := w.Stats(); st.PageableCopies != 0 || st.FailedCopies != 0 {
		t.Fatalf("fake driver: %+v", st)
	}
	// The owner releases the region: the route lets the mapping go, and
	// its registration with it; the owner unregisters its own.
	if err := p.regB.Release(context.Background(), peer); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(timeout); w.Stats().LiveHost-before != stager; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("host ranges %d more after the region went, want the Stager's %d", w.Stats().LiveHost-before, stager)
		}
	}
	if err := p.doDevLocal(t, backend.OpWrite, src, peer); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("put to the released region: %v, want ErrReleased", err)
	}
}

// TestDevicePinnedRevokeWaits: a Revoke of the peer's host region while a
// straight copy from device memory into its registered mapping is held on
// the device returns only once the copy finished; the Put then reports
// (done, or cut between chunks with ErrRevoked), and no copy runs after
// Revoke returned.
func TestDevicePinnedRevokeWaits(t *testing.T) {
	p, w := devPair(t)
	const n = 9 << 20
	src, err := p.regA.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	peer, _ := backendtest.Alloc(t, p.regB, n, buffer.AccessReadWrite)
	if err := p.doDevLocal(t, backend.OpWrite, src, peer); err != nil {
		t.Fatal(err) // mapped and registered now
	}
	rec := backendtest.NewRecorder(1)
	wr, release := devLocalWR(t, p.regA, backend.OpWrite, src, peer, rec)
	defer release()
	hold := w.Hold()
	defer hold()
	if err := p.route.Post(wr); err != nil {
		t.Fatal(err)
	}
	p.awaitInFlight(t)
	cut := make(chan error, 1)
	go func() { cut <- p.regB.Revoke(context.Background(), peer) }()
	select {
	case err := <-cut:
		t.Fatalf("revoke returned (%v) while a device copy was in flight", err)
	case <-rec.Results():
		t.Fatal("the put reported while its copy was held")
	case <-time.After(50 * time.Millisecond):
	}
	hold()
	if err := <-cut; err != nil {
		t.Fatal(err)
	}
	copied := w.Stats().CopiesDtoH
	select {
	case res := <-rec.Results():
		if res.Err != nil && !errors.Is(res.Err, rdmamgr.ErrRevoked) {
			t.Fatalf("put cut mid-copy: %v", res.Err)
		}
	case <-time.After(timeout):
		t.Fatal("the put never reported")
	}
	if now := w.Stats().CopiesDtoH; now != copied {
		t.Fatalf("%d device copies after revoke returned", now-copied)
	}
	if err := p.doDevLocal(t, backend.OpWrite, src, peer); !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Fatalf("put after revoke: %v, want ErrRevoked", err)
	}
}

// TestHostPinnedToDevice: a Put from and a Get into the caller's host
// memory of memreg.HostPinMin bytes or more, to and from a peer's device
// region opened through IPC, page-lock that memory (memreg.PinHost, on
// the first such copy) and go straight between it and the device (one
// copy per 4 MiB, none pageable), every byte where it belongs; a smaller
// region is not locked; the registration goes with the region.
func TestHostPinnedToDevice(t *testing.T) {
	p, w := devPair(t)
	const n = 9<<20 + 5
	before := w.Stats().LiveHost
	small, ls := backendtest.Alloc(t, p.regA, memreg.HostPinMin/2, buffer.AccessReadWrite)
	ha, la := backendtest.Alloc(t, p.regA, n, buffer.AccessReadWrite)
	if d := w.Stats().LiveHost - before; d != 0 {
		t.Fatalf("host regions: %d ranges registered at allocation, want none", d)
	}
	pinned := func(b buffer.Buffer) bool {
		ref, err := p.regA.AcquireLocalOf(&b)
		if err != nil {
			t.Fatal(err)
		}
		defer ref.Release()
		return ref.Region().HostPinned()
	}
	hb, err := p.regB.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	backendtest.Random(t, ls)
	if err := p.do(t, backend.OpWrite, small, backendtest.Slice(t, hb, 0, len(ls))); err != nil {
		t.Fatal(err)
	}
	if pinned(small) {
		t.Fatalf("a region of %d bytes was page-locked", len(ls))
	}
	backendtest.Random(t, la)
	want := append([]byte(nil), la...)
	st0 := w.Stats()
	if err := p.do(t, backend.OpWrite, ha, hb); err != nil {
		t.Fatal(err)
	}
	backendtest.AssertSame(t, "device region after a put", deviceBytes(t, p.regB, hb), want)
	if !pinned(ha) {
		t.Fatal("the region was not page-locked by its first device copy")
	}
	clear(la)
	st1 := w.Stats()
	if err := p.do(t, backend.OpRead, ha, hb); err != nil {
		t.Fatal(err)
	}
	backendtest.AssertSame(t, "host memory after a get", la, want)
	st2 := w.Stats()
	// deviceBytes' own read is one device-to-host copy.
	if d := st1.CopiesHtoD - st0.CopiesHtoD; d != 3 {
		t.Fatalf("put: %d host-to-device copies, want 3 (straight, 4 MiB each)", d)
	}
	if d := st2.CopiesDtoH - st1.CopiesDtoH; d != 3 {
		t.Fatalf("get: %d device-to-host copies, want 3 (straight, 4 MiB each)", d)
	}
	if d := st2.LiveHost - st1.LiveHost; d != 0 {
		t.Fatalf("the second copy registered %d more host ranges, want none (once per region)", d)
	}
	if st2.PageableCopies != 0 || st2.FailedCopies != 0 {
		t.Fatalf("fake driver: %+v", st2)
	}
	for _, b := range []buffer.Buffer{small, ha} {
		if err := p.regA.Release(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if d := st2.LiveHost - w.Stats().LiveHost; d != 1 {
		t.Fatalf("after the regions went: %d host ranges unregistered, want the page-locked region's 1", d)
	}
}

// TestPinnedMappingProxyOutlivesRoute: a peer's mapping page-locked by a
// device copy and still held by an agent's proxy when the route closes is
// unlocked at the route's Close, before the route's devices (whose
// context the registration was made in) go; the proxy's gate, closed
// later, lets the mapping go without a second unlock.
func TestPinnedMappingProxyOutlivesRoute(t *testing.T) {
	p, w := devPair(t)
	const n = 9 << 20
	before := w.Stats().LiveHost
	src, err := p.regA.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	peer, _ := backendtest.Alloc(t, p.regB, n, buffer.AccessReadWrite)
	if err := p.doDevLocal(t, backend.OpWrite, src, peer); err != nil {
		t.Fatal(err)
	}
	if d := w.Stats().LiveHost - before; d != 3 {
		t.Fatalf("%d host ranges registered, want the mapping's and the Stager's 2", d)
	}
	px := p.route.(interface {
		MapProxy(context.Context, uint64, buffer.Key, buffer.Access) ([]byte, memreg.Gate, error)
	})
	_, gate, err := px.MapProxy(context.Background(), peer.Region, peer.Key, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.route.Close(); err != nil {
		t.Fatal(err)
	}
	if d := w.Stats().LiveHost - before; d != 0 {
		t.Fatalf("after the route's Close: %d host ranges still registered (the proxy holds the mapping)", d)
	}
	gate.(memreg.GateCloser).Close()
	if st := w.Stats(); st.LiveHost != before || st.FailedCopies != 0 {
		t.Fatalf("after the proxy's gate closed: %+v", st)
	}
}
