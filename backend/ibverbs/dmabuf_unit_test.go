//go:build ibverbs

package ibverbs

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Tests of device memory's registration through dma-buf that run without
// an RDMA device: the backend is not started, a stand-in of the NIC takes
// ibv_reg_dmabuf_mr's place (dmabufState.reg) and cudafake's Config.DmaBuf
// hands out memfds as the driver's dma-buf fds.

// devHook hands an unstarted backend's registration the registry's device
// regions (RegisterRegion of a Backend does nothing before Start).
type devHook struct{ b *Backend }

func (h devHook) RegistersDevice() bool                   { return true }
func (h devHook) RegisterRegion(r *memreg.Region) error   { return h.b.registerLocked(r) }
func (h devHook) DeregisterRegion(r *memreg.Region) error { return h.b.DeregisterRegion(r) }
func (h devHook) RevokeRegion(r *memreg.Region) error     { return h.b.RevokeRegion(r) }

// fakeNIC stands in for ibv_reg_dmabuf_mr.
type fakeNIC struct {
	mu    sync.Mutex
	calls []nicCall
	fail  error // the next registration fails so (then cleared unless sticky)
	stick bool
	rkey  uint32
}

type nicCall struct {
	fd                int
	off, length, iova uint64
	access            int
}

func (n *fakeNIC) reg(fd int, off, length, iova uint64, access int) (*memReg, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, nicCall{fd, off, length, iova, access})
	if err := n.fail; err != nil {
		if !n.stick {
			n.fail = nil
		}
		return nil, err
	}
	n.rkey++
	return &memReg{rkey: 0x100 + n.rkey, lkey: n.rkey, addr: iova, length: length}, nil
}

// dmabufEnv is a registry over a fake CUDA process whose device exports
// memfds as dma-buf (dmabuf false: no dma-buf), and an unstarted backend
// registering its device regions with nic.
type dmabufEnv struct {
	w      *cudafake.World
	reg    *memreg.Registry
	b      *Backend
	nic    *fakeNIC
	mu     sync.Mutex
	open   map[int]bool // fds exported and not yet closed
	closed []int
	live   []int // the World's live allocations at each close
}

func newDmabufEnv(t *testing.T, dmabuf bool) *dmabufEnv {
	t.Helper()
	e := &dmabufEnv{nic: &fakeNIC{}, open: map[int]bool{}}
	cfg := cudafake.Config{DeviceMemory: 64 << 20}
	if dmabuf {
		cfg.DmaBuf = func(dev int, size uint64) (int, error) {
			fd, err := unix.MemfdCreate("dmabuf-test", unix.MFD_CLOEXEC)
			if err == nil {
				e.mu.Lock()
				e.open[fd] = true
				e.mu.Unlock()
			}
			return fd, err
		}
	}
	e.w = cudafake.NewWorld(cfg)
	d := e.w.Process()
	t.Cleanup(func() { d.Close() })
	e.reg = memreg.NewRegistry(7, buffer.Limits{})
	bb, err := newIBVerbs(DefaultConfig(), e.reg, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	e.b = bb.(*Backend)
	e.b.atomics = true
	e.b.dmabuf.reg = e.nic.reg
	e.b.dmabuf.closeFD = func(fd int) error {
		e.mu.Lock()
		if !e.open[fd] {
			t.Errorf("close of fd %d, not an open export", fd)
		}
		delete(e.open, fd)
		e.closed = append(e.closed, fd)
		e.live = append(e.live, e.w.Stats().LiveAllocs)
		e.mu.Unlock()
		return unix.Close(fd)
	}
	e.reg.AddHooks(devHook{e.b})
	e.reg.SetCUDA(d, nil)
	t.Cleanup(func() {
		e.reg.Close(context.Background())
		e.b.Close()
		e.mu.Lock()
		defer e.mu.Unlock()
		if len(e.open) != 0 {
			t.Errorf("dma-buf fds left open: %v", e.open)
		}
	})
	return e
}

func (e *dmabufEnv) alloc(t *testing.T, n uint64, a buffer.Access) (buffer.Buffer, *regData, memreg.DeviceExtent) {
	t.Helper()
	h, err := e.reg.AllocateAt(buffer.CUDA(0), n, a)
	if err != nil {
		t.Fatalf("AllocateAt(%d): %v", n, err)
	}
	ref, err := e.reg.AcquireLocalAny(&h)
	if err != nil {
		t.Fatal(err)
	}
	r := ref.Region()
	ref.Release()
	ext, _ := r.DeviceExtent()
	rd, _ := r.BackendData.(*regData)
	if rd == nil {
		t.Fatalf("device region %d has no regData", h.Region)
	}
	return h, rd, ext
}

// TestDmaBufRegistration: a device whose driver exports dma-buf gets its
// regions registered with the NIC: one export per allocation (two slots
// of a slab share one fd, a buffer of its own has its own), a memory
// region per buffer over exactly its bytes at its offset in the fd,
// addressed at its device address, with the access it grants (atomics
// too); the handle carries that key. Revoke drops the buffer's memory
// region (its slab's fd stays for the other slot); the fd is closed once
// the allocation's last memory region is gone, before its memory goes back
// to the device (an allocation of its own still live then).
func TestDmaBufRegistration(t *testing.T) {
	e := newDmabufEnv(t, true)
	ha, rda, ea := e.alloc(t, 100, buffer.AccessReadWrite|buffer.AccessAtomic)
	hb, rdb, eb := e.alloc(t, 4096, buffer.AccessRead)
	ho, rdo, eo := e.alloc(t, 3<<20+5, buffer.AccessReadWrite)
	if st := e.w.Stats(); st.DmaBufExports != 2 {
		t.Fatalf("%d dma-buf exports for one slab and one own allocation, want 2", st.DmaBufExports)
	}
	if ea.Base != eb.Base || rda.export != rdb.export || rda.export == rdo.export || rda.export.users != 2 {
		t.Fatalf("exports: slots %p %p (users %d), own %p", rda.export, rdb.export, rda.export.users, rdo.export)
	}
	if rdo.export.size != 3<<20+4096 {
		t.Fatalf("own allocation exported as %d bytes, want its size rounded up to the page", rdo.export.size)
	}
	want := []struct {
		h      buffer.Buffer
		ext    memreg.DeviceExtent
		n      uint64
		access int
	}{
		{ha, ea, 100, accessLocalWrite | accessRemoteRead | accessRemoteWrite | accessRemoteAtomic},
		{hb, eb, 4096, accessLocalWrite | accessRemoteRead},
		{ho, eo, 3<<20 + 5, accessLocalWrite | accessRemoteRead | accessRemoteWrite},
	}
	if len(e.nic.calls) != len(want) {
		t.Fatalf("%d registrations, want %d", len(e.nic.calls), len(want))
	}
	for i, w := range want {
		c := e.nic.calls[i]
		iova := uint64(w.ext.Base) + w.ext.Off
		if c.off != w.ext.Off || c.length != w.n || c.iova != iova || c.access != w.access {
			t.Fatalf("registration %d: %+v, want off %d length %d iova %#x access %#x", i, c, w.ext.Off, w.n, iova, w.access)
		}
		if w.h.RDMA.Addr != iova || w.h.RDMA.RKey == 0 {
			t.Fatalf("handle %d's RDMA key %+v, want the memory region's at %#x", i, w.h.RDMA, iova)
		}
	}
	if eb.Off != 4096 || rda.access != buffer.AccessReadWrite|buffer.AccessAtomic || rdb.access != buffer.AccessRead {
		t.Fatalf("slot offset %d, granted %v %v", eb.Off, rda.access, rdb.access)
	}

	if err := e.reg.Revoke(context.Background(), ha); err != nil {
		t.Fatal(err)
	}
	if rda.remote != nil || rda.export != nil || rdb.export.users != 1 || len(e.closed) != 0 {
		t.Fatalf("after Revoke: remote %v, slab users %d, fds closed %v", rda.remote, rdb.export.users, e.closed)
	}
	for _, h := range []buffer.Buffer{ha, hb} {
		if err := e.reg.Release(context.Background(), h); err != nil {
			t.Fatal(err)
		}
	}
	if len(e.closed) != 1 || len(e.b.dmabuf.exports) != 1 {
		t.Fatalf("slab's fd: closed %v, exports left %d", e.closed, len(e.b.dmabuf.exports))
	}
	// A new slot of the same (spare) slab exports it again.
	_, rdc, ec := e.alloc(t, 4096, buffer.AccessReadWrite)
	if ec.Base != ea.Base || rdc.export == nil || e.w.Stats().DmaBufExports != 3 {
		t.Fatalf("slab reused at %#x (was %#x), export %p, %d exports", ec.Base, ea.Base, rdc.export, e.w.Stats().DmaBufExports)
	}
	liveBefore := e.w.Stats().LiveAllocs
	if err := e.reg.Release(context.Background(), ho); err != nil {
		t.Fatal(err)
	}
	if len(e.closed) != 2 || e.live[1] != liveBefore || e.w.Stats().LiveAllocs != liveBefore-1 {
		t.Fatalf("own allocation: fds closed %v with %v allocations live (before %d, after %d): the fd must close before the memory is freed",
			e.closed, e.live, liveBefore, e.w.Stats().LiveAllocs)
	}
	if len(e.b.mrs) != 1 {
		t.Fatalf("%d regions left in the backend's table, want 1", len(e.b.mrs))
	}
}

// TestDmaBufRefusals: where the device, its driver or the NIC has no
// dma-buf, a device region is still allocated, has no RDMA key and says
// why (ErrNoDmaBuf, matching rdmamgr.ErrNotSupported); the device's and
// the NIC's verdicts are remembered (not asked again for later regions),
// a single failed registration is not, and no fd is left open.
func TestDmaBufRefusals(t *testing.T) {
	noKey := func(t *testing.T, e *dmabufEnv, want string) *regData {
		t.Helper()
		h, rd, _ := e.alloc(t, 4096, buffer.AccessReadWrite)
		if h.RDMA != (buffer.RDMAKey{}) || rd.remote != nil || rd.export != nil {
			t.Fatalf("handle %+v, remote %v: want no RDMA key", h.RDMA, rd.remote)
		}
		if !errors.Is(rd.why, ErrNoDmaBuf) || !errors.Is(rd.why, rdmamgr.ErrNotSupported) || !strings.Contains(rd.why.Error(), want) {
			t.Fatalf("why %v: want ErrNoDmaBuf naming %q", rd.why, want)
		}
		return rd
	}
	t.Run("device", func(t *testing.T) {
		e := newDmabufEnv(t, false)
		noKey(t, e, "device 0 does not export dma-buf")
		noKey(t, e, "device 0 does not export dma-buf")
		if len(e.nic.calls) != 0 || len(e.b.dmabuf.devWhy) != 1 {
			t.Fatalf("NIC asked %d times, device verdicts %v", len(e.nic.calls), e.b.dmabuf.devWhy)
		}
	})
	t.Run("driver", func(t *testing.T) {
		e := newDmabufEnv(t, false)
		w := cudafake.NewWorld(cudafake.Config{DmaBuf: func(int, uint64) (int, error) {
			return -1, cuda.NotSupported("cuMemGetHandleForAddressRange missing")
		}})
		d := w.Process()
		t.Cleanup(func() { d.Close() })
		e.reg.SetCUDA(d, nil) // before the first device allocation
		noKey(t, e, "the CUDA driver exports no dma-buf of device 0")
		noKey(t, e, "cuMemGetHandleForAddressRange missing")
		if len(e.nic.calls) != 0 || len(e.b.dmabuf.devWhy) != 1 {
			t.Fatalf("NIC asked %d times, device verdicts %v", len(e.nic.calls), e.b.dmabuf.devWhy)
		}
	})
	t.Run("nic", func(t *testing.T) {
		e := newDmabufEnv(t, true)
		e.nic.fail = syscall.EOPNOTSUPP
		noKey(t, e, "the NIC does not register dma-buf")
		noKey(t, e, "operation not supported")
		if len(e.nic.calls) != 1 || len(e.closed) != 1 || e.b.dmabuf.nicWhy == nil {
			t.Fatalf("NIC asked %d times (want once), fds closed %v", len(e.nic.calls), e.closed)
		}
	})
	t.Run("once", func(t *testing.T) {
		e := newDmabufEnv(t, true)
		e.nic.fail = syscall.EINVAL
		noKey(t, e, "invalid argument")
		h, rd, _ := e.alloc(t, 4096, buffer.AccessReadWrite)
		if h.RDMA.RKey == 0 || rd.remote == nil || e.b.dmabuf.nicWhy != nil || len(e.nic.calls) != 2 {
			t.Fatalf("after one EINVAL: handle %+v, %d registrations: the next region is registered", h.RDMA, len(e.nic.calls))
		}
	})
}

// TestDeviceKeyRefusedAtPost: the initiator refuses a peer's device
// buffer without an RDMA key before posting, with ErrNotSupported naming
// dma-buf; and a PutWithImm to device memory even with one (the owner's
// notice check takes host memory only).
func TestDeviceKeyRefusedAtPost(t *testing.T) {
	remote := buffer.Buffer{OwnerID: 2, Region: 3, Length: 4096, Location: buffer.CUDA(1), Access: buffer.AccessReadWrite | buffer.AccessNotify}
	wr := &backend.WorkRequest{Op: backend.OpWrite, Remote: remote}
	_, err := (&route{}).remoteAddr(wr, 4096)
	if !errors.Is(err, ErrNoDmaBuf) || !errors.Is(err, rdmamgr.ErrNotSupported) || !strings.Contains(err.Error(), "cuda:1") || !strings.Contains(err.Error(), "dma-buf") {
		t.Fatalf("remote device buffer without a key: %v", err)
	}
	remote.Location = buffer.Host
	wr.Remote = remote
	if _, err := (&route{}).remoteAddr(wr, 4096); !errors.Is(err, rdmamgr.ErrNotSupported) || errors.Is(err, ErrNoDmaBuf) {
		t.Fatalf("remote host buffer without a key: %v", err)
	}
	remote.Location = buffer.CUDA(0)
	remote.RDMA = buffer.RDMAKey{Addr: 1 << 40, RKey: 9}
	wr.Remote = remote
	if a, err := (&route{}).remoteAddr(wr, 4096); err != nil || a != 1<<40 {
		t.Fatalf("remote device buffer with a key: %#x, %v", a, err)
	}
	wr.Op = backend.OpWriteImm
	if err := errDeviceNotice(wr); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("PutWithImm to device memory: %v", err)
	}
}
