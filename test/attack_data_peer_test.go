//go:build linux

package test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	rootpkg "github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// The data listener's per-peer tables (issue 24 row 7): the victim's
// defaults are 4,096 pending route tokens (256 per peer), 4,096
// authenticated connections (256 per peer), a token valid 30 s and an
// authenticated connection closed after 30 s without a request or ping.
const (
	atkTokensPerPeer = 256
	atkConnsPerPeer  = 256
	atkIdleTimeout   = 30 * time.Second
)

// (e) One peer (one initiator id) asks for 64 handshakes × 64 route
// tokens and never uses them; then proves tokens on more data connections
// than its share and leaves them idle; then 64 more ids (the victim has
// no secret: an id is a claim) fill the token table. A legitimate route
// setup succeeds after each step, and a verified bench runs throughout.
func TestAttackDataPeerTables(t *testing.T) {
	// The control plane's handshake rate (64 per 30 s per peer) would
	// stop the attacker first: this attack is on the data listener.
	v := atkStart(t, 0, "--handshakes-per-peer", "100000")
	l := atkNewLegit(t, v)
	base := v.baseline(t)
	raw := remoteBuffer(t, v.d, 4096, buffer.AccessReadWrite) // the new routes' own
	start := time.Now()
	ctx := testCtx(t, 5*time.Minute)
	const attacker = 0xA77AC4E500000001

	benchCtx, stopBench := context.WithCancel(ctx)
	benchDone := make(chan struct{})
	go func() { defer close(benchDone); l.bench(benchCtx, 1<<30) }()
	defer func() { stopBench(); <-benchDone }()
	routes := 0
	newRoute := func(when string) {
		t.Helper()
		c, err := atkAuthConn(t, ctx, v)
		if err == nil {
			err = atkRawPutGet(c, raw, uint64(100+2*routes), bytes.Repeat([]byte{byte(routes)}, 4096))
			c.Close()
		}
		routes++
		if err != nil {
			t.Errorf("legitimate route setup %s: %v", when, err)
		}
	}

	// 1. One peer's tokens: 64 handshakes asking for 64 connections each.
	var tokens [][tokenSize]byte
	var dataAddr string
	refused := 0
	for range 64 {
		addr, toks, err := rawRouteAs(ctx, v.d, 64, attacker)
		if errors.Is(err, rootpkg.ErrLimit) {
			refused++
			continue
		}
		if err != nil {
			t.Fatalf("attacker's handshake: %v", err)
		}
		dataAddr = addr
		tokens = append(tokens, toks...)
	}
	t.Logf("one peer asked for 4096 tokens: %d handed out, %d handshakes refused", len(tokens), refused)
	if len(tokens) > atkTokensPerPeer || refused == 0 {
		t.Errorf("one peer holds %d pending route tokens (%d handshakes refused), want at most %d", len(tokens), refused, atkTokensPerPeer)
	}
	newRoute("with one peer's tokens pending")

	// 2. One peer's connections: prove tokens on 320 connections (more
	// tokens as the first are used) and leave them idle.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	connRefused := 0
	for len(held)+connRefused < atkConnsPerPeer+64 {
		if len(tokens) == 0 {
			addr, toks, err := rawRouteAs(ctx, v.d, 64, attacker)
			if err != nil {
				t.Fatalf("attacker's handshake for more tokens: %v", err)
			}
			dataAddr, tokens = addr, toks
		}
		tok := tokens[0]
		tokens = tokens[1:]
		c, err := net.DialTimeout("tcp", dataAddr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial the data port: %v", err)
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		switch err := hello(c, wireVersion, tok); {
		case err == nil:
			_ = c.SetDeadline(time.Time{})
			held = append(held, c)
		case errors.Is(err, rootpkg.ErrLimit):
			connRefused++
			c.Close()
		default:
			c.Close()
			t.Fatalf("attacker's hello: %v", err)
		}
	}
	t.Logf("one peer proved %d connections: %d served, %d refused", len(held)+connRefused, len(held), connRefused)
	if len(held) > atkConnsPerPeer || connRefused == 0 {
		t.Errorf("one peer holds %d authenticated data connections (%d refused), want at most %d", len(held), connRefused, atkConnsPerPeer)
	}
	newRoute("with one peer's connections held")

	// 3. Many peers' tokens: 64 more ids × 64 tokens fill the table.
	manyRefused := 0
	for i := range uint64(64) {
		if _, _, err := rawRouteAs(ctx, v.d, 64, attacker+1+i); errors.Is(err, rootpkg.ErrLimit) {
			manyRefused++
		} else if err != nil {
			t.Fatalf("handshake of id %d: %v", i, err)
		}
	}
	t.Logf("64 more ids asked for 64 tokens each: %d refused", manyRefused)
	newRoute("with the token table full")

	// 4. The idle connections are closed by the victim (within the idle
	// timeout; the bound here is a hang guard) and give their slots back.
	closed := make(chan bool, len(held))
	var wg sync.WaitGroup
	for _, c := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(3 * atkIdleTimeout))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			closed <- !(errors.As(err, &ne) && ne.Timeout())
		}()
	}
	wg.Wait()
	close(closed)
	n := 0
	for ok := range closed {
		if ok {
			n++
		}
	}
	t.Logf("idle authenticated connections closed by the victim: %d of %d", n, len(held))
	if n != len(held) {
		t.Errorf("%d of %d idle authenticated connections still open after %v", len(held)-n, len(held), 3*atkIdleTimeout)
	}
	newRoute("after the idle connections went")

	stopBench()
	<-benchDone
	peak := v.peakSample()
	after := v.settle(t, base)
	atkNothingGranted(t, v, 2)
	l.report(t, "e per-peer tables", base, peak, after, time.Since(start))
}
