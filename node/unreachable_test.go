package node

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// A request to an address where nothing listens fails as soon as the
// connection is refused, with the reason, not at the request's timeout
// (protoactor's remote retried for 10 s and then timed out) and not as
// "no such manager".
func TestUnreachablePeerSaysWhy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	n := startNode(t, Config{Backend: backend.KindTCP})
	for range 2 { // the second request dials anew
		_, err = n.ClientOf(dead, "").Ping(testCtx(t))
		if !errors.Is(err, rdmamgr.ErrUnknownPeer) || errors.Is(err, rdmamgr.ErrTimeout) {
			t.Fatalf("ping of %s: %v, want ErrUnknownPeer (not a timeout)", dead, err)
		}
		t.Log(err)
		if !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "cannot reach "+dead) {
			t.Fatalf("ping of %s: %v, want it to say the connection was refused", dead, err)
		}
	}
}

// A request that names a node by an address it does not answer at (the
// same listener under another name, as `status --peer 127.0.0.1:8090` for a
// daemon advertised at its host's address) is answered at once with the
// address to use, not dropped to time out.
func TestWrongAddressSaysWhich(t *testing.T) {
	a := startNode(t, Config{Backend: backend.KindTCP})
	b := startNode(t, Config{Backend: backend.KindTCP})
	_, port, _ := net.SplitHostPort(a.Addr())
	other := net.JoinHostPort("localhost", port)
	_, err := b.ClientOf(other, "").Ping(testCtx(t))
	if !errors.Is(err, rdmamgr.ErrUnknownPeer) || errors.Is(err, rdmamgr.ErrTimeout) {
		t.Fatalf("ping of %s: %v, want ErrUnknownPeer (not a timeout)", other, err)
	}
	if !strings.Contains(err.Error(), "answers at "+a.Addr()) {
		t.Fatalf("ping of %s: %v, want it to name %s", other, err, a.Addr())
	}
	t.Log(err)
}
