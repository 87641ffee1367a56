//go:build ibverbs

package ibverbs

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// Device memory on a real verbs stack (rxe0 in the Soft-RoCE VM). No
// machine here has a GPU beside an RDMA NIC: the device memory is
// cudafake's, so what runs for real is the NIC's side (ibv_reg_dmabuf_mr's
// verdict, the refusal before anything is posted, the route going on) and
// the queue pair's staging of a local device buffer over ibverbs.

// TestConformanceDevice runs the conformance suite's device variant on
// ibverbs with a device without dma-buf (cudafake's default): every
// operation on a peer's device buffer is refused with ErrNotSupported
// before anything is posted, so the RC route is not failed by it (the
// suite asserts it survives) and keeps serving host memory.
func TestConformanceDevice(t *testing.T) {
	requireDevices(t)
	f := factory(DefaultConfig())
	f.RouteSurvivesRemoteError = true // refused at Post: nothing reaches the peer
	backendtest.RunDevice(t, f)
}

// udmabufCreate is UDMABUF_CREATE, _IOW('u', 0x42, struct udmabuf_create).
const udmabufCreate = 0x40187542

// realDmaBuf returns a dma-buf fd of size fresh bytes through /dev/udmabuf
// (a sealed memfd), or, without it, a plain memfd (which a NIC that takes
// dma-buf refuses as not one), and which it is.
func realDmaBuf(size uint64) (int, string, error) {
	mfd, err := unix.MemfdCreate("dmabuf-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, "", err
	}
	if err := unix.Ftruncate(mfd, int64(size)); err != nil {
		unix.Close(mfd)
		return -1, "", err
	}
	u, err := os.OpenFile("/dev/udmabuf", os.O_RDWR, 0)
	if err != nil {
		return mfd, "memfd (no /dev/udmabuf: " + err.Error() + ")", nil
	}
	defer u.Close()
	defer unix.Close(mfd)
	if _, err := unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		return -1, "", err
	}
	arg := struct {
		memfd, flags uint32
		offset, size uint64
	}{uint32(mfd), 1 /* UDMABUF_FLAGS_CLOEXEC */, 0, size}
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, u.Fd(), udmabufCreate, uintptr(unsafe.Pointer(&arg)))
	if errno != 0 {
		return -1, "", errno
	}
	return int(fd), "udmabuf", nil
}

// TestDmaBufOnNIC hands the machine's NIC a dma-buf fd through
// ibv_reg_dmabuf_mr for a device region (the driver's export played by
// cudafake with a udmabuf where the kernel has one, else a memfd).
// rdma_rxe registers no dma-buf (EOPNOTSUPP, whatever the fd): the
// region then has no RDMA key and says why (the NIC's verdict), a
// peer's Put and Get to it are refused with ErrNotSupported before
// anything is posted, and the same route goes on moving host memory. A
// NIC that takes it gives the handle an rkey.
func TestDmaBufOnNIC(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), backendtest.OwnerA)
	o, regB := started(t, DefaultConfig(), backendtest.OwnerB)
	kind := ""
	w := cudafake.NewWorld(cudafake.Config{DmaBuf: func(dev int, size uint64) (int, error) {
		fd, k, err := realDmaBuf(size)
		kind = k
		return fd, err
	}})
	d := w.Process()
	t.Cleanup(func() { d.Close() })
	regB.SetCUDA(d, nil)
	hd, err := regB.AllocateAt(buffer.CUDA(0), 8192, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	o.mrMu.Lock()
	rd := o.mrs[hd.Region]
	why, nicWhy, exports := rd.why, o.dmabuf.nicWhy, len(o.dmabuf.exports)
	o.mrMu.Unlock()
	t.Logf("dma-buf fd: %s; registration: rkey %#x, why %v", kind, hd.RDMA.RKey, why)
	if w.Stats().DmaBufExports != 1 {
		t.Fatalf("%d exports, want 1", w.Stats().DmaBufExports)
	}
	if hd.RDMA.RKey != 0 {
		if why != nil || exports != 1 {
			t.Fatalf("registered, yet why %v, %d exports", why, exports)
		}
		t.Logf("the NIC registers dma-buf (%s): the device region has an rkey", kind)
		return
	}
	if !errors.Is(why, ErrNoDmaBuf) || exports != 0 {
		t.Fatalf("no rkey: why %v (want ErrNoDmaBuf), %d exports left open", why, exports)
	}
	if nicWhy == nil && kind == "udmabuf" {
		t.Fatalf("a real dma-buf refused, but not as the NIC's verdict: %v", why)
	}
	if strings.HasPrefix(o.dev.name, "rxe") && !errors.Is(nicWhy, syscall.EOPNOTSUPP) {
		t.Fatalf("rxe's verdict %v, want EOPNOTSUPP (rxe registers no dma-buf)", nicWhy)
	}
	rt := connect(t, a, o)
	ha, la := backendtest.Alloc(t, regA, 4096, buffer.AccessReadWrite)
	for _, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
		err := backendtest.Do(t, waitTimeout, rt, regA, op, ha, backendtest.Slice(t, hd, 0, 4096))
		if !errors.Is(err, rdmamgr.ErrNotSupported) || !errors.Is(err, ErrNoDmaBuf) {
			t.Fatalf("%v to a device buffer without an rkey: %v, want ErrNoDmaBuf", op, err)
		}
	}
	hb, lb := backendtest.Alloc(t, regB, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, la)
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("host Put on the route after the refusals: %v", err)
	}
	backendtest.AssertSame(t, "host buffer", lb, la)
}

// TestDeviceLocalStaged: ibverbs routes move host memory only (not a
// queuepair.DeviceLocalRoute), so a queue pair stages the caller's own
// device buffer through pinned host buffers: a Put from device memory and
// a Get into it move every byte over rxe, at a size across staging
// chunks.
func TestDeviceLocalStaged(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), backendtest.OwnerA)
	o, regB := started(t, DefaultConfig(), backendtest.OwnerB)
	w := cudafake.NewWorld(cudafake.Config{DeviceMemory: 64 << 20})
	d := w.Process()
	t.Cleanup(func() { d.Close() })
	regA.SetCUDA(d, nil)
	rt := connect(t, a, o)
	if dl, ok := rt.(queuepair.DeviceLocalRoute); ok && dl.TakesDeviceLocal() {
		t.Fatal("an ibverbs route says it takes device locals")
	}
	q := wiring.NewQueuePair(1, backendtest.OwnerB, rt, regA, qpbind.Options{Timeout: waitTimeout, Kind: backend.KindIBVerbs}).(*queuepair.QueuePair)
	t.Cleanup(q.Release)
	const n = 1<<20 + 4097 // over four 256 KiB staging chunks, not a multiple
	hd, err := regA.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	hb, lb := backendtest.Alloc(t, regB, n, buffer.AccessReadWrite)
	want := make([]byte, n)
	backendtest.Random(t, want)
	devCopy(t, regA, hd, want, true)
	ctx := context.Background()
	if err := q.Put(ctx, hd, hb).Wait(ctx); err != nil {
		t.Fatalf("staged Put from device memory over ibverbs: %v", err)
	}
	backendtest.AssertSame(t, "peer's host buffer after a Put from device memory", lb, want)
	backendtest.Random(t, lb)
	if err := q.Get(ctx, hd, hb).Wait(ctx); err != nil {
		t.Fatalf("staged Get into device memory over ibverbs: %v", err)
	}
	got := make([]byte, n)
	devCopy(t, regA, hd, got, false)
	backendtest.AssertSame(t, "device buffer after a Get", got, lb)
	if st := w.Stats(); st.CopiesDtoH == 0 || st.CopiesHtoD == 0 || st.PageableCopies != 0 || st.FailedCopies != 0 {
		t.Fatalf("device copies %+v: want staged through pinned memory", st)
	}
}

// devCopy copies host to (toDevice) or from device buffer h of reg and
// waits, through a pinned buffer.
func devCopy(t *testing.T, reg *memreg.Registry, h buffer.Buffer, host []byte, toDevice bool) {
	t.Helper()
	ref, err := reg.AcquireLocalAny(&h)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	span, _ := ref.Device()
	dr, c := span.Driver, span.Ctx
	pin, err := dr.HostAlloc(c, span.Len)
	if err != nil {
		t.Fatal(err)
	}
	defer dr.HostFree(c, pin)
	st, err := dr.StreamCreate(c)
	if err != nil {
		t.Fatal(err)
	}
	defer dr.StreamDestroy(c, st)
	if toDevice {
		copy(pin, host)
		err = dr.CopyHtoD(c, span.Ptr, pin, st)
	} else {
		err = dr.CopyDtoH(c, pin, span.Ptr, st)
	}
	if err == nil {
		err = dr.StreamSynchronize(c, st)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !toDevice {
		copy(host, pin)
	}
}
