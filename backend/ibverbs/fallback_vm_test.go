//go:build ibverbs

package ibverbs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// withFallback returns a started backend over a fresh registry of owner
// with a TCP fallback on loopback over the same registry (closed at the
// end of the test, after the ibverbs backend and the registry).
func withFallback(t testing.TB, cfg Config, owner uint64) (*Backend, *memreg.Registry) {
	t.Helper()
	reg := memreg.NewRegistry(owner, buffer.Limits{})
	fb, err := wiring.NewBackend[*tcp.Backend](tcp.Config{ListenAddr: "127.0.0.1:0"}, reg, nil)
	if err != nil {
		t.Fatalf("tcp: %v", err)
	}
	if err := fb.Start(context.Background()); err != nil {
		t.Fatalf("tcp Start: %v", err)
	}
	t.Cleanup(func() { fb.Close() })
	cfg.Fallback = fb
	b, err := newIBVerbs(cfg, reg, testLogger())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return b.(*Backend), reg
}

// TestConformanceDeviceFallback runs the suite's device variant on
// ibverbs with a TCP fallback and a device without dma-buf (cudafake's
// default; rxe registers none either): a peer's device buffer has no
// rkey, and its Puts and Gets go to the fallback route, which the owner
// stages: every byte moves, key, access and revocation hold (the TCP
// owner's refusals, which fail no route); PutWithImm and the atomics on
// it are refused at Post, and the route keeps moving host memory over
// the queue pair.
func TestConformanceDeviceFallback(t *testing.T) {
	requireDevices(t)
	f := factory(DefaultConfig())
	f.NewBackend = func(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry) {
		t.Helper()
		return withFallback(t, DefaultConfig(), owner)
	}
	f.DeviceRemote = true
	f.WrongKeyErr, f.RevokedErr = rdmamgr.ErrBadKey, rdmamgr.ErrRevoked // the fallback owner's refusals
	f.RouteSurvivesRemoteError = true
	backendtest.RunDevice(t, f)
}

// TestDmaBufFallback: on a route with a fallback, a Put and a Get of a
// peer's device buffer without rkey go over the fallback route (its
// figures count them, the queue pair's do not), bytes checked, while
// host buffers still go over the queue pair; a list mixing both is
// posted in order and every operation completes; closing the fallback
// route fails the route, and closing the route closes the fallback.
func TestDmaBufFallback(t *testing.T) {
	requireDevices(t)
	a, regA := withFallback(t, DefaultConfig(), backendtest.OwnerA)
	backendtest.CloseAtCleanup(t, waitTimeout, a, regA)
	o, regB := withFallback(t, DefaultConfig(), backendtest.OwnerB)
	backendtest.CloseAtCleanup(t, waitTimeout, o, regB)
	w := cudafake.NewWorld(cudafake.Config{})
	d := w.Process()
	t.Cleanup(func() { d.Close() })
	regB.SetCUDA(d, nil)
	const n = 1<<20 + 9
	hd, err := regB.AllocateAt(buffer.CUDA(0), n, buffer.AccessReadWrite|buffer.AccessNotify|buffer.AccessAtomic)
	if err != nil {
		t.Fatal(err)
	}
	if hd.RDMA != (buffer.RDMAKey{}) {
		t.Skipf("the device region got an rkey (%+v): this NIC and driver register dma-buf", hd.RDMA)
	}
	rt := connect(t, a, o)
	r := rt.(*route)
	if r.fb == nil {
		t.Fatal("route without a fallback route, though both sides have one")
	}
	ha, la := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	hb, lb := backendtest.Alloc(t, regB, n, buffer.AccessReadWrite)

	qp0, fb0 := r.State.Stats(), r.fb.Stats()
	backendtest.Random(t, la)
	want := append([]byte(nil), la...)
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpWrite, ha, hd); err != nil {
		t.Fatalf("put to a peer's device buffer without rkey: %v", err)
	}
	clear(la)
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpRead, ha, hd); err != nil {
		t.Fatalf("get from a peer's device buffer without rkey: %v", err)
	}
	backendtest.AssertSame(t, "bytes back from the device buffer", la, want)
	qp1, fb1 := r.State.Stats(), r.fb.Stats()
	if fb1.Ops-fb0.Ops != 2 || fb1.BytesPut-fb0.BytesPut != n || fb1.BytesGot-fb0.BytesGot != n || qp1.Ops != qp0.Ops {
		t.Fatalf("device ops: fallback %+v -> %+v, queue pair %+v -> %+v: want 2 ops of %d bytes each way on the fallback only", fb0, fb1, qp0, qp1, n)
	}
	if s := rt.Stats(); s.Ops != qp1.Ops+fb1.Ops {
		t.Fatalf("route stats %+v, want the queue pair's %+v plus the fallback's %+v", s, qp1, fb1)
	}

	// Host memory still over the queue pair.
	backendtest.Random(t, la)
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("host put: %v", err)
	}
	backendtest.AssertSame(t, "host buffer after a put", lb, la)
	qp2, fb2 := r.State.Stats(), r.fb.Stats()
	if qp2.Ops-qp1.Ops != 1 || fb2.Ops != fb1.Ops {
		t.Fatalf("host put: queue pair %+v -> %+v, fallback %+v -> %+v: want it on the queue pair", qp1, qp2, fb1, fb2)
	}

	// A list: host, device, host, device; all complete, in their places.
	const m = 4096
	rec := backendtest.NewRecorder(4)
	var wrs []*backend.WorkRequest
	for i := range 4 {
		remote := backendtest.Slice(t, hb, i*m, m)
		if i%2 == 1 {
			remote = backendtest.Slice(t, hd, i*m, m)
		}
		wr, release := backendtest.NewWR(t, regA, backend.OpWrite, backendtest.Slice(t, ha, i*m, m), remote, time.Now().Add(waitTimeout), rec)
		defer release()
		wrs = append(wrs, wr)
	}
	backendtest.Random(t, la[:4*m])
	if k, err := r.PostList(wrs); k != 4 || err != nil {
		t.Fatalf("PostList: %d posted, %v", k, err)
	}
	for range 4 {
		if res := rec.Wait(t, waitTimeout); res.Err != nil {
			t.Fatalf("listed put: %v", res.Err)
		}
	}
	backendtest.AssertSame(t, "host buffer after the list", lb[0:m], la[0:m])
	backendtest.AssertSame(t, "host buffer after the list", lb[2*m:3*m], la[2*m:3*m])
	clear(la[:m])
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpRead, backendtest.Slice(t, ha, 0, m), backendtest.Slice(t, hd, m, m)); err != nil {
		t.Fatal(err)
	}
	backendtest.AssertSame(t, "device buffer after the list", la[:m], la[m:2*m])
	if fb3 := r.fb.Stats(); fb3.Ops-fb2.Ops != 3 {
		t.Fatalf("fallback ops %d -> %d, want 3 more (two listed, one get)", fb2.Ops, fb3.Ops)
	}

	// PutWithImm and the atomics on the device buffer are refused at Post
	// (not sent to the fallback), and the route goes on.
	for _, op := range []backend.Op{backend.OpWriteImm, backend.OpFetchAdd} {
		if !a.Supports(op) {
			continue
		}
		remote := backendtest.Slice(t, hd, 0, 8)
		if _, err := backendtest.DoVerb(t, waitTimeout, rt, regA, op, backendtest.Slice(t, ha, 0, 8), remote, backendtest.Operands{Imm: 1}); !errors.Is(err, rdmamgr.ErrNotSupported) {
			t.Fatalf("%v on device memory: %v, want ErrNotSupported", op, err)
		}
	}

	// The fallback's end is the route's; the route's Close closes it.
	rt2 := connect(t, a, o)
	r2 := rt2.(*route)
	r2.fb.Close()
	select {
	case <-rt2.Done():
		if !errors.Is(rt2.Err(), rdmamgr.ErrClosed) {
			t.Fatalf("route failed with %v after its fallback closed, want ErrClosed", rt2.Err())
		}
	case <-time.After(waitTimeout):
		t.Fatal("route not failed after its fallback route closed")
	}
	rt.Close()
	select {
	case <-r.fb.Done():
	default:
		t.Fatal("the fallback route is not done after the route's Close")
	}
}
