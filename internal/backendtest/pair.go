package backendtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Pair is two managers' backends, A and B, and a route from A to B.
type Pair struct {
	f          Factory
	A, B       backend.Backend
	RegA, RegB *memreg.Registry
	Route      backend.Route
}

// NewPair builds A and B and a route from A to B; everything is closed at
// the end of the test.
func NewPair(t testing.TB, f Factory) *Pair {
	t.Helper()
	p := &Pair{f: f}
	p.A, p.RegA = f.NewBackend(t, OwnerA)
	CloseAtCleanup(t, f.Timeout, p.A, p.RegA)
	p.B, p.RegB = f.NewBackend(t, OwnerB)
	CloseAtCleanup(t, f.Timeout, p.B, p.RegB)
	p.Route = p.NewRoute(t)
	return p
}

// CloseAtCleanup closes b, then reg (waiting up to timeout for its
// regions' references), at the end of the test; errors fail the test.
func CloseAtCleanup(t testing.TB, timeout time.Duration, b backend.Backend, reg *memreg.Registry) {
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("%s backend Close: %v", b.Kind(), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Errorf("registry Close: %v", err)
		}
	})
}

// NewRoute connects another route from A to B (closed at the end of the
// test).
func (p *Pair) NewRoute(t testing.TB) backend.Route {
	t.Helper()
	return MustConnect(t, p.f.Timeout, p.A, p.B, OwnerB, OwnerA)
}

// MustConnect is Connect that fails the test on an error; the route is
// closed at the end of the test.
func MustConnect(t testing.TB, timeout time.Duration, a, b backend.Backend, peerOfA, peerOfB uint64) backend.Route {
	t.Helper()
	rt, err := Connect(timeout, a, b, peerOfA, peerOfB)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("route Close: %v", err)
		}
	})
	return rt
}

// Connect runs the route handshake directly (no actors): a prepares, b
// accepts, a completes.
func Connect(timeout time.Duration, a, b backend.Backend, peerOfA, peerOfB uint64) (backend.Route, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pending, info, err := a.PrepareRoute(ctx, peerOfA)
	if err != nil {
		return nil, fmt.Errorf("PrepareRoute: %w", err)
	}
	answer, err := b.AcceptRoute(ctx, peerOfB, info)
	if err != nil {
		pending.Abort()
		return nil, fmt.Errorf("AcceptRoute: %w", err)
	}
	rt, err := pending.Complete(ctx, answer)
	if err != nil {
		pending.Abort()
		return nil, fmt.Errorf("Complete: %w", err)
	}
	return rt, nil
}

// checkWorks moves 64 KiB both ways on a fresh route and verifies it.
func (p *Pair) checkWorks(t *testing.T) {
	t.Helper()
	CheckRoute(t, p.f.Timeout, p.NewRoute(t), p.RegA, p.RegB)
}

// CheckRoute moves 64 KiB of fresh random bytes both ways over rt, from
// fresh regions of regA (the route's side) and regB (its peer's), and
// verifies every byte.
func CheckRoute(t testing.TB, timeout time.Duration, rt backend.Route, regA, regB *memreg.Registry) {
	t.Helper()
	const n = 64 << 10
	ha, la := Alloc(t, regA, n, buffer.AccessReadWrite)
	hb, lb := Alloc(t, regB, n, buffer.AccessReadWrite)
	Random(t, la)
	if err := Do(t, timeout, rt, regA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("put on the route: %v", err)
	}
	AssertSame(t, "remote after put on the route", lb, la)
	Random(t, lb)
	if err := Do(t, timeout, rt, regA, backend.OpRead, ha, hb); err != nil {
		t.Fatalf("get on the route: %v", err)
	}
	AssertSame(t, "local after get on the route", la, lb)
}

// afterRemoteError checks the route's state after the peer refused an
// operation, and that the backends still serve.
func (p *Pair) afterRemoteError(t *testing.T, rt backend.Route) {
	t.Helper()
	if p.f.RouteSurvivesRemoteError {
		select {
		case <-rt.Done():
			t.Fatalf("route failed after a refused operation: %v", rt.Err())
		default:
		}
	} else {
		select {
		case <-rt.Done():
			if rt.Err() == nil {
				t.Fatal("route done without an error")
			}
		case <-time.After(p.f.Timeout):
			t.Fatal("route not failed after a remote error on an RC queue pair")
		}
	}
	p.checkWorks(t)
}
