package node

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/ibverbs"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// testTimeout bounds every wait of a test; nothing here asserts durations.
const testTimeout = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func startNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Start(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("close node %s: %v", n.Addr(), err)
		}
	})
	return n
}

// Two nodes move bytes the way `rdmamgr demo` does, handing one node's
// manager PID to the other's actor system, and both close without error.
// Before PID returned copies, the PID cached the other system's route to
// the manager, and Close's PoisonPill went out over gRPC to the manager's
// own guard, which drops it: Close waited out protoactor's 10 s and
// returned its timeout.
func TestManagerPIDAcrossNodes(t *testing.T) {
	ctx := testCtx(t)
	a, err := Start(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Start(ctx, Config{})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	pid := b.ManagerPID()
	remote, err := actor.NewClient(a.System(), pid).RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	local, err := a.Client().RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := a.Client().RequestQueuePair(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Put(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	qp.Release()
	if err := b.Close(); err != nil {
		t.Errorf("close b: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("close a: %v", err)
	}
}

// Close shuts everything down once; concurrent and later calls wait for it
// and return its result. No goroutine of the node is left.
func TestCloseIdempotent(t *testing.T) {
	defer goleak.VerifyNone(t, append(protoactorLeftovers, goleak.IgnoreCurrent())...)
	ctx := testCtx(t)
	n, err := Start(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	peer, err := Start(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.ClientOf(peer.Addr(), "").Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.ClientOf(n.Addr(), actor.DefaultName).Ping(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = n.Close() }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("close %d: %v", i, err)
		}
	}
	if err := n.Close(); err != nil {
		t.Errorf("close again: %v", err)
	}
	if _, err := n.Client().Ping(ctx); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Errorf("ping after close: %v", err)
	}
	if err := peer.Close(); err != nil {
		t.Errorf("close peer: %v", err)
	}
}

// A client-only node has no manager and still asks others.
func TestNoManager(t *testing.T) {
	ctx := testCtx(t)
	srv := startNode(t, Config{})
	cl := startNode(t, Config{NoManager: true})
	if cl.Manager() != nil || cl.Client() != nil || cl.ManagerPID() != nil || cl.Collector() != nil {
		t.Fatal("a node without manager hands out its parts")
	}
	id, err := cl.ClientOf(srv.Addr(), "").Ping(ctx)
	if err != nil || id != srv.Manager().ID() {
		t.Fatalf("ping: %x, %v; want %x", id, err, srv.Manager().ID())
	}
}

// Start refuses what it cannot run, and leaves nothing running.
func TestStartRefuses(t *testing.T) {
	defer goleak.VerifyNone(t, append(protoactorLeftovers, goleak.IgnoreCurrent())...)
	ctx := testCtx(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, c := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"unknown backend", Config{Backend: "carrier-pigeon"}, rdmamgr.ErrNotSupported},
		{"ibverbs not built", Config{Backend: backend.KindIBVerbs}, ibverbs.ErrNotBuilt},
		{"listen taken", Config{Listen: ln.Addr().String()}, nil},
		{"data listen taken", Config{TCP: tcp.Config{ListenAddr: ln.Addr().String()}}, nil},
	} {
		if c.name == "ibverbs not built" && ibverbsBuilt() {
			continue
		}
		n, err := Start(ctx, c.cfg)
		if err == nil {
			n.Close()
			t.Errorf("%s: started", c.name)
		} else if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func ibverbsBuilt() bool {
	_, err := ibverbs.Devices()
	return !errors.Is(err, ibverbs.ErrNotBuilt)
}

// The data listener sits next to the actor system unless configured.
func TestPlaceData(t *testing.T) {
	for _, c := range []struct {
		cfg                 tcp.Config
		listen, advertised  string
		wantListen, wantAdv string
	}{
		{tcp.Config{}, "127.0.0.1:0", "127.0.0.1:4000", "127.0.0.1:0", "127.0.0.1"},
		{tcp.Config{}, "0.0.0.0:8090", "10.0.0.5:8090", "0.0.0.0:0", "10.0.0.5"},
		{tcp.Config{}, "[::]:8090", "[fd00::5]:8090", "[::]:0", "fd00::5"},
		{tcp.Config{ListenAddr: "127.0.0.1:7000"}, "0.0.0.0:8090", "10.0.0.5:8090", "127.0.0.1:7000", ""},
		{tcp.Config{AdvertiseHost: "h"}, "0.0.0.0:8090", "10.0.0.5:8090", "", "h"},
		// serve --data-listen :7001 (issue 23): a fixed port, advertised
		// at the host peers reach the actor system at.
		{tcp.Config{ListenAddr: ":7001"}, "0.0.0.0:8090", "10.0.0.5:8090", ":7001", "10.0.0.5"},
		{tcp.Config{ListenAddr: "0.0.0.0:7001"}, "0.0.0.0:8090", "10.0.0.5:8090", "0.0.0.0:7001", "10.0.0.5"},
		{tcp.Config{ListenAddr: "10.0.0.5:7001"}, "0.0.0.0:8090", "10.0.0.5:8090", "10.0.0.5:7001", ""},
	} {
		got := c.cfg
		placeData(&got, c.listen, c.advertised)
		if got.ListenAddr != c.wantListen || got.AdvertiseHost != c.wantAdv {
			t.Errorf("placeData(%+v, %s, %s): listen %q advertise %q; want %q %q", c.cfg, c.listen, c.advertised,
				got.ListenAddr, got.AdvertiseHost, c.wantListen, c.wantAdv)
		}
	}
}

// The node's collector has the manager's metrics and the data listener's.
func TestCollectorHasDataListener(t *testing.T) {
	n := startNode(t, Config{})
	reg := prometheusRegistry(t, n)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		names[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	for _, name := range []string{"rdmamgr_registered_bytes", "rdmamgr_uptime_seconds",
		"rdmamgr_data_listener_up", "rdmamgr_data_accept_retries_total", "rdmamgr_data_conns_refused_total", "rdmamgr_data_pending_conns"} {
		if _, ok := names[name]; !ok {
			t.Errorf("registry lacks %s", name)
		}
	}
	if v := names["rdmamgr_data_listener_up"]; v != 1 {
		t.Errorf("rdmamgr_data_listener_up = %v while the listener serves", v)
	}
}
