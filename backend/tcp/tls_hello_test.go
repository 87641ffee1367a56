package tcp

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// tlsServer is a backend that serves its data connections over TLS, and a
// dialRawWith wrapper that speaks TLS to it.
func tlsServer(t *testing.T) (*Backend, func(*net.TCPConn) net.Conn) {
	t.Helper()
	creds := tlsCreds(t)
	b, _ := newBackend(t, Config{ServerTLS: creds.Server, ClientTLS: creds.Client}, backendtest.OwnerB)
	cfg := creds.Client.Clone()
	cfg.ServerName = "127.0.0.1"
	return b, func(c *net.TCPConn) net.Conn { return tls.Client(c, cfg) }
}

// A refused hello's answer reaches a TLS client before the server closes
// (the server writes through a buffer, tlsBufConn, whose close once
// discarded it: the client heard EOF, not why).
func TestTLSRefusedHelloIsAnswered(t *testing.T) {
	b, wrap := tlsServer(t)
	for range 20 {
		c := dialRawWith(t, b, wrap)
		if code := sendHello(t, c, testToken(7)); code != rdmapb.Code_UNAUTHENTICATED {
			t.Fatalf("hello with a token never issued: %v, want UNAUTHENTICATED", code)
		}
		c.Close()
	}
}

// A client that is not TLS is one authentication failure, counted once
// (the handshake's), and its connection closed within the hello deadline.
func TestTLSStrangerCountedOnce(t *testing.T) {
	b, _ := tlsServer(t)
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("the server did not close the connection: %v", err)
	}
	deadline := time.Now().Add(waitTimeout)
	for b.Served().AuthFail == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a second count would come now
	if n := b.Served().AuthFail; n != 1 {
		t.Fatalf("%d authentication failures counted, want 1", n)
	}
}

// noReads is a connection that writes and never reads: a TLS client that
// sends its hello and then takes none of the server's first flight.
type noReads struct {
	net.Conn
	closed chan struct{}
}

func (c *noReads) Read([]byte) (int, error) { <-c.closed; return 0, net.ErrClosed }
func (c *noReads) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return c.Conn.Close()
}

// A TLS client that never reads the server's first flight (here larger
// than every buffer on its way) holds its pending slot no longer than the
// hello deadline: the handshake runs first, with the deadline on the
// socket itself, its writes included.
func TestTLSHandshakeWithinHelloDeadline(t *testing.T) {
	creds := tlsCreds(t)
	server := creds.Server.Clone()
	cert := server.Certificates[0]
	cert.Certificate = append(append([][]byte(nil), cert.Certificate...), make([]byte, 4<<20)) // a flight far larger than the buffers
	server.Certificates = []tls.Certificate{cert}
	b, _ := newBackend(t, Config{ServerTLS: server, SocketBuffer: 64 << 10, HelloTimeout: 300 * time.Millisecond}, backendtest.OwnerB)
	raw, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.(*net.TCPConn).SetReadBuffer(4 << 10)
	c := &noReads{Conn: raw, closed: make(chan struct{})}
	defer c.Close()
	go func() { _ = tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake() }() // writes its hello, then reads forever
	deadline := time.Now().Add(waitTimeout)
	for b.Listener().Pending == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if b.Listener().Pending == 0 {
		t.Fatal("the connection never became pending")
	}
	time.Sleep(2 * time.Second) // well past the hello deadline
	if n := b.Listener().Pending; n != 0 {
		t.Fatalf("%d connections still pending 2 s after a 300 ms hello deadline", n)
	}
}
