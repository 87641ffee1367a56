package tcp

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// tokensFor asks b for n route tokens on behalf of peer.
func tokensFor(t *testing.T, b *Backend, peer uint64, n int) ([][tokenSize]byte, error) {
	t.Helper()
	info, err := b.AcceptRoute(context.Background(), peer, encodeInitiatorInfo(n))
	if err != nil {
		return nil, err
	}
	_, toks, err := decodeResponderInfo(info)
	if err != nil {
		t.Fatalf("responder info: %v", err)
	}
	return toks, nil
}

// One peer holds at most MaxTokensPerPeer pending tokens; in a full table
// a peer holding fewer takes the oldest tokens of the one holding the
// most, and a peer holding as many as the others is refused.
func TestTokensPerPeer(t *testing.T) {
	b, _ := newBackend(t, Config{MaxPendingTokens: 8, MaxTokensPerPeer: 6}, backendtest.OwnerB)
	const heavy, light, late = 0x10, 0x20, 0x30
	var heavyToks [][tokenSize]byte
	for range 3 {
		toks, err := tokensFor(t, b, heavy, 2)
		if err != nil {
			t.Fatal(err)
		}
		heavyToks = append(heavyToks, toks...)
	}
	if _, err := tokensFor(t, b, heavy, 2); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("tokens past MaxTokensPerPeer: %v, want ErrLimit", err)
	}
	if _, err := tokensFor(t, b, light, 2); err != nil {
		t.Fatal(err)
	}
	// The table is full (8): the late peer takes the heavy one's oldest.
	if _, err := tokensFor(t, b, late, 2); err != nil {
		t.Fatalf("a peer with no token in a table another fills: %v", err)
	}
	if got := b.Listener().TokensEvicted; got != 2 {
		t.Fatalf("%d tokens evicted, want 2", got)
	}
	for i, tok := range heavyToks[:2] {
		if _, ok := b.takeToken(tok); ok {
			t.Fatalf("evicted token %d still valid", i)
		}
	}
	// Now heavy 4, light 2, late 2: no one holds more than late would
	// with two more.
	if _, err := tokensFor(t, b, late, 2); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("tokens in a table shared evenly: %v, want ErrLimit", err)
	}
}

// helloAs dials b and proves a fresh token of peer; it returns the
// connection and the ack's code.
func helloAs(t *testing.T, b *Backend, peer uint64) (net.Conn, rdmapb.Code) {
	t.Helper()
	toks, err := tokensFor(t, b, peer, 1)
	if err != nil {
		t.Fatal(err)
	}
	c, served := dialFrom(t, b, "127.0.0.1")
	if !served {
		t.Fatal("no challenge")
	}
	return c, sendHello(t, c, toks[0])
}

// One peer holds at most MaxConnsPerPeer authenticated connections; when
// MaxServerConns are served, a peer with fewer closes one of the peer
// holding the most; idle connections are closed after IdleTimeout.
func TestConnsPerPeer(t *testing.T) {
	b, _ := newBackend(t, Config{MaxServerConns: 4, MaxConnsPerPeer: 3, IdleTimeout: time.Hour}, backendtest.OwnerB)
	const heavy, light = 0x10, 0x20
	var heavyConns []net.Conn
	for i := range 3 {
		c, code := helloAs(t, b, heavy)
		if code != rdmapb.Code_OK {
			t.Fatalf("connection %d of the heavy peer: %v", i, code)
		}
		heavyConns = append(heavyConns, c)
	}
	if _, code := helloAs(t, b, heavy); code != rdmapb.Code_RESOURCE_EXHAUSTED {
		t.Fatalf("connection past MaxConnsPerPeer: %v", code)
	}
	if _, code := helloAs(t, b, light); code != rdmapb.Code_OK {
		t.Fatalf("first connection of another peer: %v", code)
	}
	// Full (4): the light peer's second connection closes a heavy one.
	if _, code := helloAs(t, b, light); code != rdmapb.Code_OK {
		t.Fatalf("second connection of another peer with the table full: %v", code)
	}
	closed := 0
	for _, c := range heavyConns {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		var one [1]byte
		var ne net.Error
		if _, err := c.Read(one[:]); err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			closed++
		}
	}
	if closed != 1 {
		t.Fatalf("%d of the heavy peer's connections closed, want 1", closed)
	}
	waitFor(t, "the evicted slot back", func() bool { return b.Listener().Authenticated == 4 })
	// 2 and 2: nobody holds more than the newcomer would.
	if _, code := helloAs(t, b, light); code != rdmapb.Code_RESOURCE_EXHAUSTED {
		t.Fatalf("connection with the table shared evenly: %v", code)
	}
	if st := b.Listener(); st.ConnsEvicted != 1 || st.RefusedPeer != 1 || st.RefusedFull != 1 {
		t.Fatalf("listener %v", st)
	}
}

// An authenticated connection that sends nothing, not even a ping, is
// closed after IdleTimeout and gives its slot back; a route's pinged
// connections stay.
func TestIdleConnClosed(t *testing.T) {
	cfg := Config{IdleTimeout: 300 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond, PeerTimeout: 2 * time.Second}
	p := newPair(t, cfg, cfg)
	c, code := helloAs(t, p.b, 0x10)
	if code != rdmapb.Code_OK {
		t.Fatal(code)
	}
	if got := expectClosed(t, c); len(got) != 0 {
		t.Fatalf("server sent %q on an idle connection", got)
	}
	waitFor(t, "the idle connection's slot back", func() bool {
		return p.b.Listener().Authenticated == DefaultConfig().ConnsPerRoute
	})
	time.Sleep(3 * cfg.IdleTimeout)
	select {
	case <-p.route.Done():
		t.Fatalf("a heartbeating route went down: %v", p.route.Err())
	default:
	}
	backendtest.CheckRoute(t, waitTimeout, p.route, p.regA, p.regB)
}
