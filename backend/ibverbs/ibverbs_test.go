//go:build ibverbs

package ibverbs

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

const waitTimeout = 2 * time.Minute

// started returns a started backend and its registry, closed at cleanup.
func started(t testing.TB, cfg Config, owner uint64) (*Backend, *memreg.Registry) {
	t.Helper()
	b, reg := newStarted(t, cfg, owner)
	backendtest.CloseAtCleanup(t, waitTimeout, b, reg)
	return b, reg
}

// connect connects a route from a to b, closed at cleanup.
func connect(t testing.TB, a, b *Backend) backend.Route {
	t.Helper()
	return backendtest.MustConnect(t, waitTimeout, a, b, b.reg.OwnerID(), a.reg.OwnerID())
}

func TestDevices(t *testing.T) {
	devs := requireDevices(t)
	for _, d := range devs {
		t.Logf("%s port %d %s %s mtu %d lid %d", d.Name, d.Port, d.State, d.LinkLayer, d.ActiveMTU, d.LID)
		for _, g := range d.GIDs {
			t.Logf("  gid %s", g)
		}
		if d.Name == "" || d.Port < 1 || d.State == "" || d.LinkLayer == "" || d.ActiveMTU == 0 {
			t.Errorf("incomplete device info %+v", d)
		}
	}
}

func TestStartPicksDevicePortAndGID(t *testing.T) {
	devs := requireDevices(t)
	b, _ := started(t, DefaultConfig(), 1)
	t.Logf("addr %q gid index %d mtu %d max message %d in flight %d cq %d", b.Addr(), b.gidIndex, mtuBytes(b.mtu), b.maxMsg, b.inflight, b.res.cqCapacity())
	if b.Kind() != backend.KindIBVerbs {
		t.Errorf("Kind %q", b.Kind())
	}
	if b.Addr() == "" || b.maxMsg == 0 || b.inflight != DefaultConfig().MaxInFlight {
		t.Errorf("addr %q max message %d in flight %d", b.Addr(), b.maxMsg, b.inflight)
	}
	if devs[0].LinkLayer == "Ethernet" && b.gid == ([16]byte{}) {
		t.Error("no GID on RoCE")
	}

	// An explicit device, port and GID index.
	cfg := DefaultConfig()
	cfg.Device, cfg.Port, cfg.GIDIndex = devs[0].Name, devs[0].Port, 0
	b2, _ := started(t, cfg, 2)
	if b2.gidIndex != 0 || b2.dev.name != devs[0].Name {
		t.Errorf("explicit config gave %s gid index %d", b2.dev.name, b2.gidIndex)
	}

	cfg.Device = "no-such-device"
	reg := memreg.NewRegistry(3, buffer.Limits{})
	b3, err := newIBVerbs(cfg, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b3.Start(context.Background()); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Errorf("Start on a missing device: %v, want rdmamgr.ErrNotSupported", err)
	}
	if err := b3.Close(); err != nil {
		t.Errorf("Close after failed Start: %v", err)
	}
}

func TestCloseWithoutStart(t *testing.T) {
	reg := memreg.NewRegistry(1, buffer.Limits{})
	b, err := newIBVerbs(DefaultConfig(), reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.PrepareRoute(context.Background(), 2); !errors.Is(err, rdmamgr.ErrNotStarted) {
		t.Errorf("PrepareRoute before Start: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}

func TestRemoteWithoutRDMAKey(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	b, _ := started(t, DefaultConfig(), 2)
	rt := connect(t, a, b)
	ha, _ := backendtest.Alloc(t, regA, 64, buffer.AccessReadWrite)
	tcpOnly := memreg.NewRegistry(2, buffer.Limits{}) // no RDMA backend: handles without rkey
	defer tcpOnly.Close(context.Background())
	hb, _ := backendtest.Alloc(t, tcpOnly, 64, buffer.AccessReadWrite)
	err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpWrite, ha, hb)
	if !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("put to a handle without rkey: %v, want rdmamgr.ErrNotSupported", err)
	}
}

// TestRegionsBeforeStart: regions that exist when the backend starts are
// registered too (their memory can be the local side of a transfer).
func TestRegionsBeforeStart(t *testing.T) {
	requireDevices(t)
	regA := memreg.NewRegistry(1, buffer.Limits{})
	ha, la := backendtest.Alloc(t, regA, 4096, buffer.AccessReadWrite)
	be, err := newIBVerbs(DefaultConfig(), regA, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := be.(*Backend)
	defer regA.Close(context.Background())
	defer a.Close()
	if got := regA.Regions()[0].RDMA; got.RKey == 0 || got.Addr != addrOf(la) {
		t.Errorf("existing region's RDMA key %+v", got)
	}
	b, regB := started(t, DefaultConfig(), 2)
	rt := connect(t, a, b)
	hb, lb := backendtest.Alloc(t, regB, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, la)
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("put from a region registered at Start: %v", err)
	}
	backendtest.AssertSame(t, "remote", lb, la)
}

func TestRouteLimit(t *testing.T) {
	requireDevices(t)
	cfg := DefaultConfig()
	cfg.MaxRoutes = 2
	a, _ := started(t, cfg, 1)
	p1, _, err := a.PrepareRoute(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	p2, _, err := a.PrepareRoute(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.PrepareRoute(context.Background(), 2); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("third queue pair with MaxRoutes 2: %v, want rdmamgr.ErrLimit", err)
	}
	p1.Abort()
	p1.Abort()
	p3, _, err := a.PrepareRoute(context.Background(), 2)
	if err != nil {
		t.Fatalf("after Abort: %v", err)
	}
	p3.Abort()
	p2.Abort()
}

// peerQP returns b's accepted route for rt's queue pair's peer.
func acceptedRoute(t *testing.T, b *Backend) *route {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for r := range b.routes {
		if r.accepted {
			return r
		}
	}
	t.Fatal("no accepted queue pair")
	return nil
}

// TestDeadline: the peer's queue pair stops answering (moved to the error
// state behind the initiator's back) and the transport's retries take far
// longer than the request's deadline. A deadline alone does not fail the
// route (neighbours would fail with it); a request the device still holds
// DrainTimeout past its deadline does: the route fails with ErrPeerGone,
// and the request completes with ErrDeadline once the device flushed it,
// long before the transport would give up.
func TestDeadline(t *testing.T) {
	requireDevices(t)
	cfgA := DefaultConfig()
	cfgA.AckTimeout = 22 // 17 s per retry: the watchdog must be first
	cfgA.KeepAlive = -1
	a, regA := started(t, cfgA, 1)
	cfgB := DefaultConfig()
	cfgB.KeepAlive = -1
	b, regB := started(t, cfgB, 2)
	rt := connect(t, a, b)
	ha, la := backendtest.Alloc(t, regA, 1<<20, buffer.AccessReadWrite)
	hb, _ := backendtest.Alloc(t, regB, 1<<20, buffer.AccessReadWrite)
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpWrite, ha, hb); err != nil {
		t.Fatal(err)
	}
	if err := acceptedRoute(t, b).qp.toErr(); err != nil {
		t.Fatal(err)
	}
	backendtest.Random(t, la)
	rec := backendtest.NewRecorder(2)
	wr, release := backendtest.NewWR(t, regA, backend.OpRead, ha, hb, time.Now().Add(500*time.Millisecond), rec)
	defer release()
	if err := rt.Post(wr); err != nil {
		t.Fatal(err)
	}
	res := rec.Wait(t, waitTimeout)
	if !errors.Is(res.Err, rdmamgr.ErrDeadline) {
		t.Fatalf("get from a dead queue pair: %v, want rdmamgr.ErrDeadline", res.Err)
	}
	select {
	case <-rt.Done():
	default:
		t.Fatal("route not failed after a missed deadline")
	}
	if !errors.Is(rt.Err(), rdmamgr.ErrPeerGone) {
		t.Errorf("route error %v, want rdmamgr.ErrPeerGone", rt.Err())
	}
	wr2, release2 := backendtest.NewWR(t, regA, backend.OpRead, ha, hb, time.Now().Add(time.Second), rec)
	defer release2()
	if err := rt.Post(wr2); err == nil {
		t.Fatal("post on a failed route accepted")
	}
	// A new route works.
	rt2 := connect(t, a, b)
	if err := backendtest.Do(t, waitTimeout, rt2, regA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("put on a new route: %v", err)
	}
}

// TestKeepAlive: idle queue pairs probe their peer; when the peer's queue
// pair is gone the route fails with rdmamgr.ErrPeerGone, and the
// responder's accepted queue pair of a closed route is freed.
func TestKeepAlive(t *testing.T) {
	requireDevices(t)
	cfg := DefaultConfig()
	cfg.KeepAlive = 200 * time.Millisecond
	cfg.AckTimeout = 12 // 16 ms
	cfg.RetryCount = 3
	a, _ := started(t, cfg, 1)
	b, _ := started(t, cfg, 2)

	// The initiator closes its route: b's accepted queue pair goes away.
	rt := connect(t, a, b)
	time.Sleep(3 * cfg.KeepAlive) // a few successful probes both ways
	select {
	case <-rt.Done():
		t.Fatalf("idle route failed: %v", rt.Err())
	default:
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's accepted queue pair to be freed", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.routes) == 0 && b.nqp == 0
	})

	// The responder's queue pair dies: the idle initiator finds out.
	rt2 := connect(t, a, b)
	acc := acceptedRoute(t, b)
	acc.Close()
	select {
	case <-rt2.Done():
		if !errors.Is(rt2.Err(), rdmamgr.ErrPeerGone) {
			t.Fatalf("route error %v, want rdmamgr.ErrPeerGone", rt2.Err())
		}
	case <-time.After(waitTimeout):
		t.Fatal("idle route to a dead queue pair not failed")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
