package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// A hostile or slow hello: refused with its code, counted, and never
// allowed to take an authenticated slot.

func TestHelloGarbage(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	// A full hello's worth of garbage: refused with PROTOCOL, then closed.
	c := dialRaw(t, p.b)
	writeRaw(t, c, bytes.Repeat([]byte{0xFF}, helloSize))
	got := expectClosed(t, c)
	if len(got) != helloAckSize {
		t.Fatalf("server sent %d bytes, want a hello ack", len(got))
	}
	if code, err := decodeHelloAck(got); err != nil || rdmapb.Code(code) != rdmapb.Code_PROTOCOL {
		t.Fatalf("ack code %d, %v; want PROTOCOL", code, err)
	}
	waitAuthFail(t, p.b, 1)

	// A short hello followed by EOF: closed without an answer.
	c = dialRaw(t, p.b)
	writeRaw(t, c, []byte("GET / HTTP/1.0\r\n"))
	_ = c.(*net.TCPConn).CloseWrite()
	if got := expectClosed(t, c); len(got) != 0 {
		t.Fatalf("server answered a truncated hello with %q", got)
	}
	waitAuthFail(t, p.b, 2)

	// Another protocol version: refused with VERSION_MISMATCH.
	c = dialRaw(t, p.b)
	var h [helloSize]byte
	encodeHello(h[:], routeToken(t, p.b), [macSize]byte{})
	binary.LittleEndian.PutUint16(h[4:], Version+1)
	writeRaw(t, c, h[:])
	got = expectClosed(t, c)
	code, err := decodeHelloAck(got)
	if err != nil || rdmapb.Code(code) != rdmapb.Code_VERSION_MISMATCH {
		t.Fatalf("ack code %d, %v; want VERSION_MISMATCH", code, err)
	}
	waitAuthFail(t, p.b, 3)

	if sv := p.b.Served(); sv.Ops != 0 || sv.Rejected != 0 {
		t.Fatalf("served %+v", sv)
	}
	backendtest.CheckRoute(t, waitTimeout, p.route, p.regA, p.regB)
	p.checkServes(t)
}

func TestHelloTokens(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	authFail := uint64(0)

	t.Run("unknown token", func(t *testing.T) {
		c := dialRaw(t, p.b)
		if code := sendHello(t, c, testToken(7)); code != rdmapb.Code_UNAUTHENTICATED {
			t.Fatalf("ack %v, want UNAUTHENTICATED", code)
		}
		if got := expectClosed(t, c); len(got) != 0 {
			t.Fatalf("server sent %d more bytes after refusing", len(got))
		}
		authFail++
		waitAuthFail(t, p.b, authFail)
		p.checkServes(t)
	})

	t.Run("token reused", func(t *testing.T) {
		tok := routeToken(t, p.b)
		c1 := dialRaw(t, p.b)
		if code := sendHello(t, c1, tok); code != rdmapb.Code_OK {
			t.Fatalf("first use: %v, want OK", code)
		}
		c2 := dialRaw(t, p.b)
		if code := sendHello(t, c2, tok); code != rdmapb.Code_UNAUTHENTICATED {
			t.Fatalf("second use: %v, want UNAUTHENTICATED", code)
		}
		expectClosed(t, c2)
		authFail++
		waitAuthFail(t, p.b, authFail)
		// The first connection is authenticated and serves requests.
		h, mem := backendtest.Alloc(t, p.regB, 100, buffer.AccessReadWrite)
		data := backendtest.RandomData(t, 100)
		writeRaw(t, c1, append(reqBytes(reqHeader{op: opWrite, length: 100, wrid: 1, region: h.Region, key: h.Key}), data...))
		if r := readResp(t, c1); r.code != 0 || r.wrid != 1 {
			t.Fatalf("response %+v", r)
		}
		backendtest.AssertSame(t, "written region", mem, data)
		p.checkServes(t)
	})

	t.Run("token of a failed route handshake", func(t *testing.T) {
		// The initiator's Complete with a used token is refused with
		// ErrUnauthenticated.
		tok := routeToken(t, p.b)
		c := dialRaw(t, p.b)
		if code := sendHello(t, c, tok); code != rdmapb.Code_OK {
			t.Fatalf("first use: %v", code)
		}
		pending, _, err := p.a.PrepareRoute(context.Background(), backendtest.OwnerB)
		if err != nil {
			t.Fatalf("PrepareRoute: %v", err)
		}
		_, err = pending.Complete(context.Background(), encodeResponderInfo(p.b.Addr(), [][tokenSize]byte{tok}))
		if !errors.Is(err, rdmamgr.ErrUnauthenticated) {
			t.Fatalf("Complete with a used token: %v, want ErrUnauthenticated", err)
		}
		authFail++
		waitAuthFail(t, p.b, authFail)
		p.checkServes(t)
	})

	t.Run("token expired", func(t *testing.T) {
		p.b.setTokenTTL(time.Millisecond)
		tok := routeToken(t, p.b)
		p.b.setTokenTTL(DefaultConfig().TokenTTL)
		time.Sleep(20 * time.Millisecond)
		c := dialRaw(t, p.b)
		if code := sendHello(t, c, tok); code != rdmapb.Code_UNAUTHENTICATED {
			t.Fatalf("expired token: %v, want UNAUTHENTICATED", code)
		}
		expectClosed(t, c)
		authFail++
		waitAuthFail(t, p.b, authFail)
		p.checkServes(t)
	})

	backendtest.CheckRoute(t, waitTimeout, p.route, p.regA, p.regB)
	if sv := p.b.Served(); sv.Rejected != 0 {
		t.Fatalf("served %+v", sv)
	}
}

func TestSlowHello(t *testing.T) {
	p := newPair(t, Config{}, Config{HelloTimeout: 500 * time.Millisecond})
	c := dialRaw(t, p.b) // and say nothing
	if got := expectClosed(t, c); len(got) != 0 {
		t.Fatalf("server sent %q to a silent client", got)
	}
	waitAuthFail(t, p.b, 1)
	p.checkServes(t)
}
