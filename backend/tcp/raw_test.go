package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Raw-socket helpers against a backend's data listener.

func dialRaw(t *testing.T, b *Backend) net.Conn {
	t.Helper()
	return dialRawWith(t, b, nil)
}

// dialRawWith is dialRaw with the TCP connection wrapped by wrap (TLS, a
// smaller receive buffer) when it is not nil.
func dialRawWith(t *testing.T, b *Backend, wrap func(*net.TCPConn) net.Conn) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatalf("dial %s: %v", b.Addr(), err)
	}
	if wrap != nil {
		c = wrap(c.(*net.TCPConn))
	}
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	t.Cleanup(func() { c.Close() })
	// The server speaks first: its challenge nonce.
	var ch [challengeSize]byte
	if _, err := io.ReadFull(c, ch[:]); err != nil {
		t.Fatalf("challenge: %v", err)
	}
	if _, err := decodeChallenge(ch[:]); err != nil {
		t.Fatalf("challenge: %v", err)
	}
	return c
}

// routeToken gets a fresh single-use token from b as a peer would.
func routeToken(t *testing.T, b *Backend) [tokenSize]byte {
	t.Helper()
	return routeTokenInfo(t, b, encodeInitiatorInfo(1))
}

// routeTokenInfo is routeToken for initiator info info.
func routeTokenInfo(t *testing.T, b *Backend, info []byte) [tokenSize]byte {
	t.Helper()
	info, err := b.AcceptRoute(context.Background(), backendtest.OwnerA, info)
	if err != nil {
		t.Fatalf("AcceptRoute: %v", err)
	}
	addr, tokens, err := decodeResponderInfo(info)
	if err != nil {
		t.Fatalf("responder info: %v", err)
	}
	if addr != b.Addr() || len(tokens) != 1 {
		t.Fatalf("responder info %q with %d tokens", addr, len(tokens))
	}
	return tokens[0]
}

func writeRaw(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// sendHello writes a hello with tok and returns the acknowledged code.
func sendHello(t *testing.T, c net.Conn, tok [tokenSize]byte) rdmapb.Code {
	t.Helper()
	var h [helloSize]byte
	encodeHello(h[:], tok, [macSize]byte{})
	writeRaw(t, c, h[:])
	var ack [helloAckSize]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		t.Fatalf("hello ack: %v", err)
	}
	code, err := decodeHelloAck(ack[:])
	if err != nil {
		t.Fatalf("hello ack: %v", err)
	}
	return rdmapb.Code(code)
}

// authed returns a data connection authenticated with a fresh token.
func authed(t *testing.T, b *Backend) net.Conn {
	t.Helper()
	return authedInfo(t, b, encodeInitiatorInfo(1))
}

// authedAgent is authed on a host agent's route (its frames may name an
// origin).
func authedAgent(t *testing.T, b *Backend) net.Conn {
	t.Helper()
	return authedInfo(t, b, withAgent(encodeInitiatorInfo(1)))
}

// authedInfo is authed with a route token for initiator info info.
func authedInfo(t *testing.T, b *Backend, info []byte) net.Conn {
	t.Helper()
	return authedWith(t, b, info, nil)
}

// authedWith is authedInfo over a connection dialRawWith wraps.
func authedWith(t *testing.T, b *Backend, info []byte, wrap func(*net.TCPConn) net.Conn) net.Conn {
	t.Helper()
	c := dialRawWith(t, b, wrap)
	if code := sendHello(t, c, routeTokenInfo(t, b, info)); code != rdmapb.Code_OK {
		t.Fatalf("hello refused: %v", code)
	}
	return c
}

// expectClosed reads until the server closes c and returns what it sent.
func expectClosed(t *testing.T, c net.Conn) []byte {
	t.Helper()
	got, err := io.ReadAll(c)
	var ne net.Error
	if err != nil && (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("connection not closed by the server: %v", err)
	}
	return got
}

func reqBytes(h reqHeader) []byte {
	b := make([]byte, h.size())
	h.encode(b)
	return b
}

func readResp(t *testing.T, c net.Conn) respHeader {
	t.Helper()
	var b [respMaxSize]byte
	if _, err := io.ReadFull(c, b[:respHeaderSize]); err != nil {
		t.Fatalf("read response: %v", err)
	}
	n := respSize(b[0] &^ respFlag)
	if _, err := io.ReadFull(c, b[respHeaderSize:n]); err != nil {
		t.Fatalf("read response value: %v", err)
	}
	var h respHeader
	if err := h.decode(b[:n]); err != nil {
		t.Fatalf("decode response: %v", err)
	}
	return h
}

func waitAuthFail(t *testing.T, b *Backend, want uint64) {
	t.Helper()
	if got := b.Served().AuthFail; got != want {
		t.Fatalf("AuthFail = %d, want %d", got, want)
	}
}
