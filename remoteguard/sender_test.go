package remoteguard

import (
	"net/netip"
	"testing"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/internal/control"
)

func TestCheckSender(t *testing.T) {
	sys := protoactor.NewActorSystem()
	defer sys.Shutdown()
	sys.ProcessRegistry.Address = "127.0.0.1:9000"
	g := &guard{sys: sys, book: control.BookOf(sys)}
	lo := netip.MustParseAddr("127.0.0.1")
	far, near := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.1")

	// Rows share one connection until fresh is set, so binding is tested
	// too.
	var c *connPeer
	for i, tc := range []struct {
		fresh         bool
		remote, local netip.Addr
		sender        string
		ok            bool
	}{
		{true, lo, lo, "127.0.0.1:9000", false}, // our own address
		{false, lo, lo, "", false},
		{false, lo, lo, "nonhost", false}, // protoactor's "this process"
		{false, lo, lo, "127.0.0.2:9000", false},
		{false, lo, lo, "localhost:9000", false},
		{false, lo, lo, "[::1]:9000", false},
		{false, lo, lo, "bad address", false},
		{false, lo, lo, "127.0.0.1:5000", true}, // binds the connection
		{false, lo, lo, "127.0.0.1:5000", true},
		{false, lo, lo, "127.0.0.1:5001", false}, // another address on a bound connection
		{false, lo, lo, "localhost:5000", false},
		{true, lo, lo, "localhost:5001", true},
		{true, far, near, "10.0.0.6:1", false}, // another host than the connection's
		{false, far, near, "peer.example:1", false},
		{false, far, near, "127.0.0.1:1", false},
		{false, far, near, "10.0.0.1:9000", false}, // not the connection's host
		{false, far, near, "10.0.0.5:1", true},
		{false, far, near, "[::ffff:10.0.0.5]:1", false},
		{true, near, near, "10.0.0.1:9000", false}, // our listener on our other address
		{false, near, near, "10.0.0.1:9001", true},
	} {
		if tc.fresh {
			c = &connPeer{remote: tc.remote, local: tc.local}
		}
		err := g.checkSender(c, protoactor.NewPID(tc.sender, "x"))
		if (err == nil) != tc.ok {
			t.Errorf("row %d: sender %q from %s: err %v, want ok=%v", i, tc.sender, tc.remote, err, tc.ok)
		}
	}
	if err := g.checkTarget(protoactor.NewPID("127.0.0.1:9001", "rdma-manager")); err == nil {
		t.Error("target in another process accepted")
	}
	if err := g.checkTarget(protoactor.NewPID("127.0.0.1:9000", "rdma-manager")); err != nil {
		t.Errorf("our own target refused: %v", err)
	}
}
