//go:build linux

package hostagent

import (
	"slices"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// spreadPair starts agents A and B keeping width routes to each other
// (TCP routes of one connection standing in for ibverbs queue pairs; A's
// manager as o says), attaches P to A and nq processes to B, and returns
// them with a put from P to a process of B.
func spreadPair(t *testing.T, width int, o mgrOpts, nq int) (a, b *Agent, p *fakeProc, qs []*fakeProc, put func(q *fakeProc, wrid uint64)) {
	t.Helper()
	secret := testSecret(t)
	sys := newSystem(t)
	spread := func(c *Config) { c.spreadTCP, c.Routes = true, 2*width }
	o.conns = 1
	a = startAgentWith(t, sys, "agentA", 1, secret, o, spread)
	b = startAgentWith(t, sys, "agentB", 2, secret, mgrOpts{conns: 1}, spread)
	ctx := testCtx(t)
	p = newFakeProc(t, secret)
	if err := p.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.c.Close() })
	for range nq {
		q := newFakeProc(t, secret)
		if err := q.attach(ctx, b.cfg.Socket, attachOpts{secret: secret}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.c.Close() })
		qs = append(qs, q)
	}
	src, _ := p.alloc(t, 4096, buffer.AccessReadWrite)
	put = func(q *fakeProc, wrid uint64) {
		t.Helper()
		dst, _ := q.alloc(t, 4096, buffer.AccessReadWrite)
		p.post(t, agentwire.Post{WRID: wrid, Op: backend.OpWrite, Via: q.welcome.Slot, FarAgent: b.Addr(),
			FarAgentID: q.welcome.AgentID, Local: localOf(src), Remote: dst})
		if d := p.dones(t, 1)[wrid]; d.Code != 0 {
			t.Fatalf("put %d: %v", wrid, rdmapb.Code(d.Code))
		}
	}
	return a, b, p, qs, put
}

// farRoutesOf returns a copy of A's routes to b, once the setup of each
// (and of the set) ended.
func farRoutesOf(a, b *Agent) []*farRoute {
	a.mu.Lock()
	s := a.far[b.Addr()]
	a.mu.Unlock()
	if s == nil {
		return nil
	}
	<-s.ready
	a.mu.Lock()
	fs := slices.Clone(s.routes)
	a.mu.Unlock()
	for _, f := range fs {
		if f != nil {
			<-f.ready
		}
	}
	return fs
}

// A far route that dies (ibverbs: an RC queue pair that met a stale
// proxy) is replaced alone: the next operation pinned to it gets a new
// one, and the set's other routes serve on untouched.
func TestFarRouteReplacedAlone(t *testing.T) {
	const width = 4
	a, b, p, qs, put := spreadPair(t, width, mgrOpts{}, 1)
	q := qs[0]
	put(q, 1)
	waitFor(t, "every route up", func() bool {
		for _, f := range farRoutesOf(a, b) {
			if f == nil || !f.setupEnded() {
				return false
			}
		}
		return true
	})
	before := farRoutesOf(a, b)
	if len(before) != width {
		t.Fatalf("%d routes to B, want %d", len(before), width)
	}
	k := int(pinOf(p.welcome.Slot, q.welcome.Slot) % width)
	before[k].route.Close()
	put(q, 2)
	after := farRoutesOf(a, b)
	for i, f := range after {
		switch {
		case i == k && (f == before[k] || f.route == before[k].route || routeDown(f.route)):
			t.Fatalf("route %d (dead) was not replaced: %+v", i, f)
		case i != k && (f != before[i] || routeDown(f.route)):
			t.Fatalf("route %d changed or went down with route %d: %+v, was %+v", i, k, f, before[i])
		}
	}
}

// Past the manager's MaxRoutes a set holds fewer routes: the pairs pinned
// to one the manager refused go on route 0 (for the set's life, so they
// keep one route), and every operation works, whatever route it is pinned
// to.
func TestFarRoutesUnderMaxRoutes(t *testing.T) {
	const width = 4
	a, b, p, qs, put := spreadPair(t, width, mgrOpts{maxRoutes: 2}, 8)
	pins := map[int]bool{}
	for i, q := range qs {
		put(q, uint64(i+1))
		pins[int(pinOf(p.welcome.Slot, q.welcome.Slot)%width)] = true
	}
	if len(pins) != width {
		t.Fatalf("the processes are pinned to routes %v, want all %d", pins, width)
	}
	// Route 0 and one of the others (set up at once, whichever the
	// manager took first) are up, the two others refused.
	fs := farRoutesOf(a, b)
	up := -1
	for k, f := range fs {
		switch {
		case k == 0 && f.err == nil:
		case k > 0 && f.err == nil && up < 0:
			up = k
		case k > 0 && f.limited():
		default:
			t.Fatalf("route %d: %+v: want route 0 and one other up, the others refused past MaxRoutes 2", k, f)
		}
	}
	if up < 0 {
		t.Fatal("no route but route 0 up under MaxRoutes 2")
	}
	for k := range width {
		want := fs[0].route
		if k == up {
			want = fs[up].route
		}
		if r, _ := a.cachedFar(b.Addr(), uint32(k)); r != want {
			t.Fatalf("pin %d takes route %p, want %p", k, r, want)
		}
	}
}

// A far agent that restarts (same address, another manager id) ends the
// whole set: the first route set up again names the new agent, and the
// set is set up afresh, every route of it to the new agent, whichever
// route the next operation is pinned to.
func TestFarRoutesAfterRestart(t *testing.T) {
	const width = 2
	secret := testSecret(t)
	sys := newSystem(t)
	spread := func(c *Config) { c.spreadTCP, c.Routes = true, 2*width }
	a := startAgentWith(t, sys, "agentA", 1, secret, mgrOpts{conns: 1}, spread)
	b := startAgentWith(t, sys, "agentB", 2, secret, mgrOpts{conns: 1}, spread)
	ctx := testCtx(t)
	p, q := newFakeProc(t, secret), newFakeProc(t, secret)
	if err := p.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	if err := q.attach(ctx, b.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.c.Close(); q.c.Close() })
	src, _ := p.alloc(t, 4096, buffer.AccessReadWrite)
	put := func(q *fakeProc, wrid uint64) {
		t.Helper()
		dst, _ := q.alloc(t, 4096, buffer.AccessReadWrite)
		p.post(t, agentwire.Post{WRID: wrid, Op: backend.OpWrite, Via: q.welcome.Slot, FarAgent: b.Addr(),
			FarAgentID: q.welcome.AgentID, Local: localOf(src), Remote: dst})
		if d := p.dones(t, 1)[wrid]; d.Code != 0 {
			t.Fatalf("put %d: %v", wrid, rdmapb.Code(d.Code))
		}
	}
	put(q, 1)
	waitFor(t, "every route up", func() bool {
		fs := farRoutesOf(a, b)
		return len(fs) == width && fs[1] != nil && fs[1].setupEnded()
	})
	before := farRoutesOf(a, b)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.mgr.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range before {
		waitFor(t, "the old routes down", func() bool { return routeDown(f.route) })
	}
	b2 := startAgentWith(t, sys, "agentB", 2, secret, mgrOpts{conns: 1}, spread)
	q2 := newFakeProc(t, secret)
	if err := q2.attach(ctx, b2.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q2.c.Close() })
	put(q2, 2)
	waitFor(t, "the new set's routes up", func() bool {
		fs := farRoutesOf(a, b2)
		return len(fs) == width && fs[0] != nil && fs[1] != nil && fs[0].setupEnded() && fs[1].setupEnded()
	})
	for k, f := range farRoutesOf(a, b2) {
		if f.err != nil || f.peerID != b2.mgr.ID() || f.route == before[k].route || routeDown(f.route) {
			t.Fatalf("route %d after the restart: %+v (peer %016x), want a live route to the new agent %016x", k, f, f.peerID, b2.mgr.ID())
		}
	}
}
