package tcp

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/testscale"
)

// The package's tests use backendtest's helpers (memory, completions,
// routes, byte checks); these bind them to the TCP backend's concrete
// types and to waitTimeout.

// waitTimeout bounds every wait of the tests; it is a hang guard, never an
// assertion on how fast something happens (scaled for -race and load).
var waitTimeout = testscale.Timeout(30 * time.Second)

// TestMain fails the package's tests if any goroutine is left after them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newBackend returns a started backend on 127.0.0.1:0 serving a fresh
// registry of owner; both are closed at cleanup. A config that leaves the
// peer timeout at its default gets it scaled by testscale: a peer slowed
// by -race and a loaded machine is not a dead one, except in the tests
// that set their own.
func newBackend(t testing.TB, cfg Config, owner uint64) (*Backend, *memreg.Registry) {
	t.Helper()
	reg := memreg.NewRegistry(owner, buffer.Limits{})
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = "127.0.0.1:0"
	}
	if cfg.PeerTimeout == 0 {
		cfg.PeerTimeout = testscale.Timeout(DefaultConfig().PeerTimeout)
	}
	b, err := New(cfg, reg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	backendtest.CloseAtCleanup(t, waitTimeout, b, reg)
	return b, reg
}

// pair is two managers' backends and a route from a (initiator) to b.
type pair struct {
	a, b       *Backend
	regA, regB *memreg.Registry
	route      backend.Route
}

func newPair(t testing.TB, cfgA, cfgB Config) *pair {
	t.Helper()
	p := &pair{}
	p.a, p.regA = newBackend(t, cfgA, backendtest.OwnerA)
	p.b, p.regB = newBackend(t, cfgB, backendtest.OwnerB)
	p.route = p.newRoute(t)
	return p
}

// newRoute opens another route from a to b (closed at cleanup).
func (p *pair) newRoute(t testing.TB) backend.Route {
	t.Helper()
	return backendtest.MustConnect(t, waitTimeout, p.a, p.b, backendtest.OwnerB, backendtest.OwnerA)
}

// checkServes verifies that b still serves: a put and a get on a fresh
// route.
func (p *pair) checkServes(t testing.TB) {
	t.Helper()
	backendtest.CheckRoute(t, waitTimeout, p.newRoute(t), p.regA, p.regB)
}

// do posts one operation on raw local memory (TCP needs no local region)
// and returns Post's error or the completion's.
func do(t testing.TB, rt backend.Route, op backend.Op, local []byte, remote buffer.Buffer) error {
	t.Helper()
	return backendtest.DoWR(t, waitTimeout, rt, &backend.WorkRequest{Op: op, Local: local, Remote: remote, Deadline: time.Now().Add(waitTimeout)})
}

// servedEventually polls b's served counters until ok accepts them. The
// server counts a READ after its payload went out, so the initiator may see
// the completion a moment before the counter moves.
func servedEventually(t testing.TB, b *Backend, ok func(backend.ServedStats) bool) backend.ServedStats {
	t.Helper()
	end := time.Now().Add(waitTimeout)
	for {
		sv := b.Served()
		if ok(sv) || time.Now().After(end) {
			return sv
		}
		time.Sleep(time.Millisecond)
	}
}

// loopbackPair returns the two ends of a loopback TCP connection.
func loopbackPair(t testing.TB) (a, b net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			c = nil
		}
		got <- c
	}()
	a, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if b = <-got; b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
