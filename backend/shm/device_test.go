//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// devPair is a pair whose registries allocate device memory through two
// processes of one fake CUDA host.
func devPair(t *testing.T) (*pair, *cudafake.World) {
	t.Helper()
	p := newPair(t, shm.Config{})
	w := cudafake.NewWorld(cudafake.Config{DeviceMemory: 256 << 20})
	da, db := w.Process(), w.Process()
	t.Cleanup(func() { da.Close(); db.Close() })
	p.regA.SetCUDA(da, nil)
	p.regB.SetCUDA(db, nil)
	return p, w
}

// deviceBytes returns the bytes of device buffer h of reg.
func deviceBytes(t *testing.T, reg *memreg.Registry, h buffer.Buffer) []byte {
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

// TestDeviceThroughIPC: Puts and Gets between host memory and a peer's
// device region (an allocation of its own, read-write) go through CUDA
// IPC, opened once, never through the fallback; a read-only or pooled
// device region goes to the fallback (which stages it, and refuses a Put
// to the read-only one); PutWithImm and the atomics on the IPC mapping
// are refused with ErrNotSupported; the route's end closes the mapping.
func TestDeviceThroughIPC(t *testing.T) {
	p, w := devPair(t)
	const n = 3<<20 + 5
	ha, la := backendtest.Alloc(t, p.regA, n, buffer.AccessReadWrite)
	hb, err := p.regB.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite|buffer.AccessAtomic|buffer.AccessNotify)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, n)
	for _, sz := range []int{1, 4095, 1<<20 + 17, n} {
		off := (n - sz) / 3
		backendtest.Random(t, la[:sz])
		src, dst := backendtest.Slice(t, ha, 0, sz), backendtest.Slice(t, hb, off, sz)
		if err := p.do(t, backend.OpWrite, src, dst); err != nil {
			t.Fatalf("put of %d bytes: %v", sz, err)
		}
		copy(want[off:], la[:sz])
		backendtest.AssertSame(t, "device region after a put", deviceBytes(t, p.regB, hb), want)
		clear(la[:sz])
		if err := p.do(t, backend.OpRead, src, dst); err != nil {
			t.Fatalf("get of %d bytes: %v", sz, err)
		}
		backendtest.AssertSame(t, "host buffer after a get", la[:sz], want[off:off+sz])
	}
	if opens, fb := shm.RoutePaths(p.route); opens != 1 || fb != 0 {
		t.Fatalf("IPC opens %d, fallback operations %d: want 1 and 0", opens, fb)
	}
	if st := w.Stats(); st.LiveIPC != 1 || st.PageableCopies != 0 || st.FailedCopies != 0 {
		t.Fatalf("fake driver after the copies: %+v", st)
	}
	for _, op := range []backend.Op{backend.OpWriteImm, backend.OpCompareSwap, backend.OpFetchAdd} {
		remote := backendtest.Slice(t, hb, 0, 8)
		if _, err := backendtest.DoVerb(t, timeout, p.route, p.regA, op, backendtest.Slice(t, ha, 0, 8), remote, backendtest.Operands{Imm: 1, Swap: 1}); !errors.Is(err, rdmamgr.ErrNotSupported) {
			t.Fatalf("%v on an IPC-mapped device region: %v, want ErrNotSupported", op, err)
		}
	}
	backendtest.AssertSame(t, "device region after refused operations", deviceBytes(t, p.regB, hb), want)

	// Not exported: read-only (an IPC mapping writes) and pooled (its
	// allocation holds other buffers). The fallback serves them.
	ro, err := p.regB.AllocateAt(buffer.CUDA(0), 4<<20, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.do(t, backend.OpWrite, backendtest.Slice(t, ha, 0, 4096), backendtest.Slice(t, ro, 0, 4096)); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("put to a read-only device region: %v, want ErrAccess", err)
	}
	small, err := p.regB.AllocateAt(buffer.CUDA(0), 4096, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	backendtest.Random(t, la[:4096])
	if err := p.do(t, backend.OpWrite, backendtest.Slice(t, ha, 0, 4096), small); err != nil {
		t.Fatalf("put to a pooled device region: %v", err)
	}
	backendtest.AssertSame(t, "pooled device region after a put", deviceBytes(t, p.regB, small), la[:4096])
	if opens, fb := shm.RoutePaths(p.route); opens != 1 || fb == 0 {
		t.Fatalf("IPC opens %d, fallback operations %d: want 1 and some", opens, fb)
	}

	if err := p.route.Close(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.LiveIPC != 0 || st.IPCOpens != 1 || st.IPCCloses != 1 {
		t.Fatalf("after the route's end: %+v, want its one IPC mapping closed", st)
	}
}

// TestDeviceRevokeWaitsForStalledCopy: a Put whose device copies are held
// in flight (the fake driver's streams stopped) holds the owner's Revoke
// until they finished; once Revoke returned no copy touches the region,
// the initiator closes its IPC mapping (the owner's gone notice), and the
// region is refused with ErrRevoked. The same for Release, and for a Put
// from the caller's own device memory (device to device).
func TestDeviceRevokeWaitsForStalledCopy(t *testing.T) {
	for _, tc := range []struct{ release, devLocal bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		release, name := tc.release, "revoke"
		if release {
			name = "release"
		}
		sub := name
		if tc.devLocal {
			sub += "/from device memory"
		}
		t.Run(sub, func(t *testing.T) {
			p, w := devPair(t)
			const n = 4 << 20
			ha, la := backendtest.Alloc(t, p.regA, n, buffer.AccessReadWrite)
			hb, err := p.regB.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.do(t, backend.OpWrite, backendtest.Slice(t, ha, 0, 64), backendtest.Slice(t, hb, 0, 64)); err != nil {
				t.Fatal(err) // mapped now
			}
			backendtest.Random(t, la)
			rec := backendtest.NewRecorder(1)
			wr, releaseWR := backendtest.NewWR(t, p.regA, backend.OpWrite, ha, hb, time.Now().Add(timeout), rec)
			defer releaseWR()
			if tc.devLocal { // device to device (devlocal.go)
				local, err := p.regA.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
				if err != nil {
					t.Fatal(err)
				}
				setDevice(t, p.regA, local, la)
				var rel func()
				wr, rel = devLocalWR(t, p.regA, backend.OpWrite, local, hb, rec)
				defer rel()
			}
			hold := w.Hold()
			defer hold()
			if err := p.route.Post(wr); err != nil {
				t.Fatal(err)
			}
			p.awaitInFlight(t)
			cut := make(chan error, 1)
			go func() {
				if release {
					cut <- p.regB.Release(context.Background(), hb)
				} else {
					cut <- p.regB.Revoke(context.Background(), hb)
				}
			}()
			select {
			case err := <-cut:
				t.Fatalf("%s returned (%v) while a device copy was in flight", name, err)
			case <-rec.Results():
				t.Fatal("the put reported while its copies were held")
			case <-time.After(50 * time.Millisecond):
			}
			hold()
			if err := <-cut; err != nil {
				t.Fatal(err)
			}
			copied := w.Stats().CopiesHtoD + w.Stats().CopiesDtoD
			var res backendtest.Result
			select {
			case res = <-rec.Results():
			case <-time.After(timeout):
				t.Fatal("the put never reported")
			}
			if res.Err != nil && !errors.Is(res.Err, rdmamgr.ErrRevoked) && !errors.Is(res.Err, rdmamgr.ErrReleased) {
				t.Fatalf("put cut mid-copy: %v", res.Err)
			}
			if now := w.Stats().CopiesHtoD + w.Stats().CopiesDtoD; now != copied {
				t.Fatalf("%d device copies after %s returned", now-copied, name)
			}
			for deadline := time.Now().Add(timeout); w.Stats().LiveIPC != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the IPC mapping stays open after %s: %+v", name, w.Stats())
				}
			}
			want := rdmamgr.ErrRevoked
			if release {
				want = rdmamgr.ErrReleased
			}
			if err := p.do(t, backend.OpRead, backendtest.Slice(t, ha, 0, 64), backendtest.Slice(t, hb, 0, 64)); !errors.Is(err, want) {
				t.Fatalf("get after %s: %v, want %v", name, err, want)
			}
			if st := w.Stats(); st.FailedCopies != 0 {
				t.Fatalf("failed device copies: %+v", st)
			}
		})
	}
}

// TestOwnerDeviceMapReplies: the owner answers a map request for a device
// region without needDevice (an initiator that does not know CUDA IPC)
// with NOT_SUPPORTED, as before; with it, a read-write allocation of its
// own gets its IPC handle (which another process opens, and whose
// allocation is the region's length), a read-only or a pooled one
// NOT_SUPPORTED, a wrong key as for host memory; the connection keeps serving.
func TestOwnerDeviceMapReplies(t *testing.T) {
	p, w := devPair(t)
	rw, err := p.regB.AllocateAt(buffer.CUDA(0), 2<<20, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := p.regB.AllocateAt(buffer.CUDA(0), 2<<20, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	pooled, err := p.regB.AllocateAt(buffer.CUDA(0), 4096, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	c := authed(t, p.b)
	code := func(m []byte) int {
		if len(m) < 13 || m[0] != shm.MsgMapped {
			t.Fatalf("reply %x, want a refusal", m)
		}
		return int(m[9]) | int(m[10])<<8
	}
	ask := func(h buffer.Buffer, need byte) []byte {
		t.Helper()
		c.write(t, shm.EncodeMap(1, h.Region, h.Key, need))
		m, fds, err := c.read()
		if err != nil || len(fds) != 0 {
			t.Fatalf("reply: %v with %d fds", err, len(fds))
		}
		return m
	}
	rwNeed := byte(buffer.AccessReadWrite)
	if got := code(ask(rw, rwNeed)); got != int(rdmapb.Code_NOT_SUPPORTED) {
		t.Fatalf("device region without needDevice: code %d, want NOT_SUPPORTED", got)
	}
	m := ask(rw, rwNeed|shm.NeedDevice)
	if m[0] != shm.MsgMappedDevice {
		t.Fatalf("reply %x, want a device map reply", m)
	}
	_, n, dev, h, err := shm.DecodeMappedDevice(m)
	if err != nil || n != 2<<20 || dev != 0 {
		t.Fatalf("device map reply: %d bytes on device %d, %v", n, dev, err)
	}
	other := w.Process()
	defer other.Close()
	ctx, err := other.PrimaryContext(0)
	if err != nil {
		t.Fatal(err)
	}
	ptr, err := other.IPCOpenMemHandle(ctx, h)
	if err != nil {
		t.Fatalf("the handle does not open: %v", err)
	}
	if base, size, err := other.MemAddressRange(ctx, ptr); err != nil || base != ptr || size != 2<<20 {
		t.Fatalf("the handle opens %d bytes at %#x (%v), want the region's own allocation", size, base, err)
	}
	if err := other.IPCCloseMemHandle(ctx, ptr); err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]buffer.Buffer{"read-only": ro, "pooled": pooled} {
		need := rwNeed
		if name == "read-only" {
			need = byte(buffer.AccessRead)
		}
		if got := code(ask(h, need|shm.NeedDevice)); got != int(rdmapb.Code_NOT_SUPPORTED) {
			t.Fatalf("%s device region: code %d, want NOT_SUPPORTED", name, got)
		}
	}
	bad := rw
	bad.Key[0] ^= 1
	if got, want := code(ask(bad, rwNeed|shm.NeedDevice)), int(backend.RemoteCode(rdmamgr.ErrBadKey)); got != want {
		t.Fatalf("wrong key: code %d, want %d (as for host memory)", got, want)
	}
	h2, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	c.write(t, shm.EncodeMap(2, h2.Region, h2.Key, rwNeed|shm.NeedDevice))
	if m, fds, err := c.read(); err != nil || m[0] != shm.MsgMapped || code(m) != 0 || len(fds) != 1 {
		t.Fatalf("host region with needDevice: %x, %d fds, %v; want its memfd", m, len(fds), err)
	}
}

// TestDeviceEvictedCloses: a device region's IPC mapping evicted from the
// route's cache (MaxMapped) is closed, and opened again on its next use.
func TestDeviceEvictedCloses(t *testing.T) {
	p := newPair(t, shm.Config{MaxMapped: 1})
	w := cudafake.NewWorld(cudafake.Config{DeviceMemory: 64 << 20})
	da, db := w.Process(), w.Process()
	t.Cleanup(func() { da.Close(); db.Close() })
	p.regA.SetCUDA(da, nil)
	p.regB.SetCUDA(db, nil)
	ha, _ := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	hb, err := p.regB.AllocateAt(buffer.CUDA(0), 2<<20, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	for i := range 2 {
		if err := p.do(t, backend.OpWrite, ha, backendtest.Slice(t, hb, 0, 4096)); err != nil {
			t.Fatal(err)
		}
		if st := w.Stats(); st.LiveIPC != 1 || st.IPCOpens != i+1 {
			t.Fatalf("after use %d: %+v", i+1, st)
		}
		if err := p.do(t, backend.OpWrite, ha, host); err != nil { // evicts the device region
			t.Fatal(err)
		}
		if st := w.Stats(); st.LiveIPC != 0 || st.IPCCloses != i+1 {
			t.Fatalf("after eviction %d: %+v", i+1, st)
		}
	}
}

// TestDeviceCancelWaitsForQueuedCopy: a Put to a peer's device region
// cancelled while its copies are held in flight reports only once they
// finished (reported means finished), with its cause; its slot's count is
// back to zero by then, and the route goes on.
func TestDeviceCancelWaitsForQueuedCopy(t *testing.T) {
	p, w := devPair(t)
	const n = 9 << 20 // chunks of 1 MiB (the Stager's) or 4 MiB (page-locked memory: devpin.go)
	ha, la := backendtest.Alloc(t, p.regA, n, buffer.AccessReadWrite)
	hb, err := p.regB.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	backendtest.Random(t, la)
	hold := w.Hold()
	defer hold()
	rec := backendtest.NewRecorder(1)
	wr, releaseWR := backendtest.NewWR(t, p.regA, backend.OpWrite, ha, hb, time.Now().Add(timeout), rec)
	defer releaseWR()
	if err := p.route.Post(wr); err != nil {
		t.Fatal(err)
	}
	p.awaitInFlight(t)
	cause := errors.New("test cancel")
	wr.RequestCancel(cause)
	p.route.Cancel(wr)
	select {
	case res := <-rec.Results():
		t.Fatalf("the put reported (%v) while its device copies were held", res.Err)
	case <-time.After(50 * time.Millisecond):
	}
	hold()
	select {
	case res := <-rec.Results():
		if !errors.Is(res.Err, cause) {
			t.Fatalf("cancelled put: %v, want its cause", res.Err)
		}
	case <-time.After(timeout):
		t.Fatal("the cancelled put never reported")
	}
	if n := p.b.InFlight(); n != 0 {
		t.Fatalf("%d copies counted in flight after the put reported", n)
	}
	if err := p.do(t, backend.OpRead, backendtest.Slice(t, ha, 0, 64), backendtest.Slice(t, hb, 0, 64)); err != nil {
		t.Fatalf("the route after a cancel: %v", err)
	}
}
