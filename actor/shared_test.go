package actor

import (
	"errors"
	"slices"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// SharedRoute hands every caller the one cached route to a peer, with the
// peer's id, and the route stays up until the last reference is dropped
// (RouteLinger < 0: it closes at once then). A second release of the same
// reference does nothing.
func TestSharedRoute(t *testing.T) {
	_, a, b := newPairNoLinger(t)
	ctx := testCtx(t)
	pid := b.PID()
	r1, id1, kind, rel1, err := wiring.SharedRoute(a, ctx, pid.Address, pid.Id, 0)
	if err != nil {
		t.Fatal(err)
	}
	r2, id2, _, rel2, err := wiring.SharedRoute(a, ctx, pid.Address, pid.Id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r1 != r2 || id1 != b.ID() || id2 != b.ID() || kind != backend.KindTCP {
		t.Fatalf("routes %p %p, ids %x %x, kind %s, want one tcp route to %x", r1, r2, id1, id2, kind, b.ID())
	}
	rel1()
	rel1() // once only: the route is still held by rel2's reference
	select {
	case <-r1.Done():
		t.Fatal("route closed while a reference is held")
	default:
	}
	rel2()
	<-r1.Done() // the last reference closed it (no linger)
	if _, _, _, _, err := wiring.SharedRoute(a, ctx, "127.0.0.1:1", "nobody", 0); err == nil {
		t.Fatal("route to nobody: no error")
	}
}

// Route k > 0 to a peer is a route of its own (its own handshake, the
// same peer), cached apart under "addr/name#k" (status says so), ended
// by its own last reference alone; every route k counts against
// MaxRoutes, and k is bounded.
func TestSharedRouteK(t *testing.T) {
	sys := newSystem(t)
	a := startManager(t, sys, Config{Name: "a", RouteLinger: -1, MaxRoutes: 2})
	b := startManager(t, sys, Config{Name: "b"})
	ctx := testCtx(t)
	pid := b.PID()
	r0, _, _, rel0, err := wiring.SharedRoute(a, ctx, pid.Address, pid.Id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rel0()
	r1, id1, _, rel1, err := wiring.SharedRoute(a, ctx, pid.Address, pid.Id, 1)
	if err != nil {
		t.Fatal(err)
	}
	again, _, _, relAgain, err := wiring.SharedRoute(a, ctx, pid.Address, pid.Id, 1)
	if err != nil {
		t.Fatal(err)
	}
	relAgain()
	if r1 == r0 || again != r1 || id1 != b.ID() {
		t.Fatalf("route 1 %p (again %p), route 0 %p, peer %x: want a second route to %x, cached", r1, again, r0, id1, b.ID())
	}
	var keys []string
	for _, r := range a.status().Routes {
		keys = append(keys, r.PeerAddr)
	}
	slices.Sort(keys)
	if want := []string{peerKey(pid), peerKey(pid) + "#1"}; !slices.Equal(keys, want) {
		t.Fatalf("routes in status: %q, want %q", keys, want)
	}
	if _, _, _, _, err := wiring.SharedRoute(a, ctx, pid.Address, pid.Id, 2); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("a third route under MaxRoutes 2: %v, want ErrLimit", err)
	}
	for _, k := range []int{-1, maxSharedRoutes} {
		if _, _, _, _, err := wiring.SharedRoute(a, ctx, pid.Address, pid.Id, k); !errors.Is(err, rdmamgr.ErrInvalid) {
			t.Fatalf("route %d: %v, want ErrInvalid", k, err)
		}
	}
	rel1()
	<-r1.Done()
	select {
	case <-r0.Done():
		t.Fatal("route 0 closed with route 1")
	default:
	}
}
