package actor

import (
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// A peer that left (membership) loses its routes: queue pairs on them fail
// with ErrPeerGone, and a new queue pair sets a new route up.
func TestDropPeer(t *testing.T) {
	_, a, b := newPair(t)
	ctx := testCtx(t)
	local := requestBuf(t, ctx, a.Client(), 4096, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, b.Client(), 4096, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, b.PID())
	if err := qp.Put(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if n := a.DropPeer("10.212.0.99:1", "test"); n != 0 {
		t.Fatalf("dropped %d routes of another address", n)
	}
	if n := a.DropPeer(b.PID().Address, "test"); n != 1 {
		t.Fatalf("dropped %d routes, want 1", n)
	}
	if err := qp.Put(local, remote).Wait(ctx); !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("put on a dropped route: %v, want ErrPeerGone", err)
	}
	qp2 := requestQP(t, ctx, a, b.PID())
	if err := qp2.Get(local, remote).Wait(ctx); err != nil {
		t.Fatalf("get on a new route: %v", err)
	}
}
