package actor

import (
	"testing"

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
	r1, id1, rel1, err := wiring.SharedRoute(a, ctx, pid.Address, pid.Id)
	if err != nil {
		t.Fatal(err)
	}
	r2, id2, rel2, err := wiring.SharedRoute(a, ctx, pid.Address, pid.Id)
	if err != nil {
		t.Fatal(err)
	}
	if r1 != r2 || id1 != b.ID() || id2 != b.ID() {
		t.Fatalf("routes %p %p, ids %x %x, want one route to %x", r1, r2, id1, id2, b.ID())
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
	if _, _, _, err := wiring.SharedRoute(a, ctx, "127.0.0.1:1", "nobody"); err == nil {
		t.Fatal("route to nobody: no error")
	}
}
