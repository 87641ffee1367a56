package remoteguard

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/control"
)

// TestConnCap: connections over the total or per-address cap are refused
// with rdmamgr.ErrLimit; a slot comes back on Close and on a failed read.
func TestConnCap(t *testing.T) {
	sys := protoactor.NewActorSystem()
	defer sys.Shutdown()
	c := &connCap{TransportCredentials: insecure.NewCredentials(), max: 3, perIP: 2, byIP: make(map[netip.Addr]int), book: control.BookOf(sys)}
	pipe := func() (net.Conn, net.Conn) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		cl, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sv, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close(); sv.Close() })
		return cl, sv
	}
	var held []net.Conn
	for i := range 2 {
		_, sv := pipe()
		conn, _, err := c.ServerHandshake(sv)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, conn)
	}
	_, sv := pipe()
	if _, _, err := c.ServerHandshake(sv); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("third connection from one address: %v, want rdmamgr.ErrLimit", err)
	}
	held[0].Close()
	held[0].Close() // idempotent
	cl, sv := pipe()
	conn, _, err := c.ServerHandshake(sv)
	if err != nil {
		t.Fatalf("after a close: %v", err)
	}
	cl.Close()
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a closed peer succeeded")
	}
	if c.n != 1 || c.byIP[netip.MustParseAddr("127.0.0.1")] != 1 {
		t.Fatalf("after a failed read: %d counted, by address %v", c.n, c.byIP)
	}
	conn.Close() // does not count twice
	if c.n != 1 {
		t.Fatalf("close after a failed read: %d counted", c.n)
	}
}
