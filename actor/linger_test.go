package actor

import (
	"testing"
	"time"
)

// A client that opens a queue pair per request: 100 request/release
// cycles to one peer succeed on one route (issue 23: the 65th failed with
// "more than 64 route handshakes in 30s", each release having torn the
// route down), and the peer saw one handshake.
func TestRouteLingersAcrossQueuePairChurn(t *testing.T) {
	sys := newSystem(t)
	ctx := testCtx(t)
	a := startManager(t, sys, Config{Name: "a"})
	b := startManager(t, sys, Config{Name: "b"})
	for i := range 100 {
		qp, err := a.Client().RequestQueuePair(ctx, b.PID())
		if err != nil {
			t.Fatalf("queue pair %d: %v", i+1, err)
		}
		qp.Release()
	}
	if rs := routes(t, ctx, a); len(rs) != 1 || rs[0].State != "up" {
		t.Errorf("routes after the churn: %v, want one lingering route", rs)
	}
	if in := inbound(t, ctx, b); len(in) != 1 {
		t.Errorf("b's inbound routes: %d, want 1 (one handshake)", len(in))
	}
}

// An idle route closes once its linger runs out; a queue pair taken
// meanwhile keeps it.
func TestRouteLingerExpires(t *testing.T) {
	sys := newSystem(t)
	ctx := testCtx(t)
	a := startManager(t, sys, Config{Name: "a", RouteLinger: 50 * time.Millisecond})
	b := startManager(t, sys, Config{Name: "b"})
	qp := requestQP(t, ctx, a, b.PID())
	r := qp.Route()
	qp.Release()
	qp = requestQP(t, ctx, a, b.PID())
	if qp.Route() != r {
		t.Error("a queue pair within the linger got another route")
	}
	time.Sleep(200 * time.Millisecond) // longer than the linger: held by qp
	if rs := routes(t, ctx, a); len(rs) != 1 {
		t.Fatalf("route with a queue pair closed: %v", rs)
	}
	qp.Release()
	select {
	case <-r.Done():
	case <-ctx.Done():
		t.Fatal("idle route not closed after its linger")
	}
	if rs := routes(t, ctx, a); len(rs) != 0 {
		t.Errorf("routes after the linger: %v", rs)
	}
}

// A lingering route whose peer goes away leaves the table at once, not
// when its linger runs out (the cancel stress test found a dead route
// still listed after its daemon exited).
func TestLingeringRouteGoneWithPeer(t *testing.T) {
	sys := newSystem(t)
	ctx := testCtx(t)
	a := startManager(t, sys, Config{Name: "a", RouteLinger: time.Hour})
	b := startManager(t, sys, Config{Name: "b"})
	qp := requestQP(t, ctx, a, b.PID())
	r := qp.Route()
	qp.Release()
	if rs := routes(t, ctx, a); len(rs) != 1 {
		t.Fatalf("released route does not linger: %v", rs)
	}
	b.Close()
	select {
	case <-r.Done():
	case <-ctx.Done():
		t.Fatal("route not down after its peer closed")
	}
	for len(routes(t, ctx, a)) != 0 {
		if ctx.Err() != nil {
			t.Fatalf("dead route still listed: %v", routes(t, ctx, a))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
