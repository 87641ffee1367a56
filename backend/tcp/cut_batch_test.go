package tcp

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// A READ answer waiting in a batch when its region is revoked is answered
// REVOKED with no payload; the READ beside it in the same batch gets its
// bytes, and the connection serves on. (The batch once failed whole and
// the connection closed, failing every operation in flight on it: a host
// agent's connection carries many processes' operations, and one
// process's end failed the others'.)
func TestCutInBatchFailsOnlyItsRead(t *testing.T) {
	p := newPair(t, Config{}, Config{FrameTimeout: 10 * time.Minute})
	hA, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	hB, memB := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, memB)
	rA := regionOf(t, p.regB, hA)
	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(time.Minute))

	// The flush of the batch of both READs revokes A and waits until the
	// registry says so; Revoke itself waits for the batch's reference, so
	// it runs aside.
	revoked := make(chan error, 1)
	var once atomic.Bool
	hook := func(s *serverConn) {
		if len(s.segs) != 2 || !once.CompareAndSwap(false, true) {
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			revoked <- p.regB.Revoke(ctx, hA)
		}()
		for p.regB.RemoteErr(rA) == nil {
			time.Sleep(time.Millisecond)
		}
	}
	testHookFlush.Store(&hook)
	t.Cleanup(func() { testHookFlush.Store(nil) })

	// Both READs in one write: the server reads them in one burst and
	// answers them in one batch.
	req := append(reqBytes(reqHeader{op: opRead, length: 4096, wrid: 1, region: hA.Region, key: hA.Key}),
		reqBytes(reqHeader{op: opRead, length: 4096, wrid: 2, region: hB.Region, key: hB.Key})...)
	writeRaw(t, c, req)
	if r := readResp(t, c); r.wrid != 1 || rdmapb.Code(r.code) != rdmapb.Code_REVOKED || r.length != 0 {
		t.Fatalf("READ of the revoked region: %+v, want REVOKED and no payload", r)
	}
	if r := readResp(t, c); r.wrid != 2 || r.code != 0 || r.length != 4096 {
		t.Fatalf("READ beside it: %+v, want its 4096 bytes", r)
	}
	got := make([]byte, 4096)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("READ beside it: payload: %v", err)
	}
	if !bytes.Equal(got, memB) {
		t.Fatalf("READ beside it: wrong bytes (first diff at %d)", backendtest.FirstDiff(got, memB))
	}
	if err := <-revoked; err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if !once.Load() {
		t.Fatal("the flush hook never ran")
	}
	// In step: the next request on the same connection is served.
	writeRaw(t, c, reqBytes(reqHeader{op: opRead, length: 4096, wrid: 3, region: hB.Region, key: hB.Key}))
	if r := readResp(t, c); r.wrid != 3 || r.code != 0 || r.length != 4096 {
		t.Fatalf("next READ on the connection: %+v", r)
	}
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, memB) {
		t.Fatalf("next READ on the connection: %v", err)
	}
	if n := p.b.Served().Rejected; n == 0 {
		t.Fatal("the refused READ is not counted as rejected")
	}
}

// A READ whose bytes have all left before its region is revoked holds
// neither the revocation nor the READ after it in the same batch: the
// peer, reading that one steadily, gets all of it (a cut once shortened
// the whole batch's write to cutGrace and closed the connection), and
// Revoke returns while it is still being read.
func TestCutAfterItsBytesLeftSparesNeighbour(t *testing.T) {
	small := func(c *net.TCPConn) net.Conn { _ = c.SetReadBuffer(16 << 10); return c }
	t.Run("tcp", func(t *testing.T) {
		testCutAfterItsBytesLeft(t, newPair(t, Config{}, Config{FrameTimeout: 10 * time.Minute, SocketBuffer: 16 << 10}), small)
	})
	// Over TLS too: the socket under TLS keeps what a deadline cut short
	// (tls_writer.go), so the grace's timed-out write leaves the record
	// layer whole and the batch goes on (a *tls.Conn's write, once timed
	// out, fails for good).
	t.Run("tls", func(t *testing.T) {
		creds := tlsCreds(t)
		side := Config{ServerTLS: creds.Server, ClientTLS: creds.Client}
		b := side
		b.FrameTimeout, b.SocketBuffer = 10*time.Minute, 16<<10
		cfg := creds.Client.Clone()
		cfg.ServerName = "127.0.0.1"
		testCutAfterItsBytesLeft(t, newPair(t, side, b), func(c *net.TCPConn) net.Conn { return tls.Client(c, cfg) })
	})
}

func testCutAfterItsBytesLeft(t *testing.T, p *pair, wrap func(*net.TCPConn) net.Conn) {
	hA, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	const nB = 4 << 20
	hB, memB := backendtest.Alloc(t, p.regB, nB, buffer.AccessReadWrite)
	backendtest.Random(t, memB)
	rA := regionOf(t, p.regB, hA)
	info := encodeInitiatorInfo(1)
	if p.b.cfg.ServerTLS != nil {
		info = withTLS(info)
	}
	c := authedWith(t, p.b, info, wrap)
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	writeRaw(t, c, append(reqBytes(reqHeader{op: opRead, length: 4096, wrid: 1, region: hA.Region, key: hA.Key}),
		reqBytes(reqHeader{op: opRead, length: nB, wrid: 2, region: hB.Region, key: hB.Key})...))
	if r := readResp(t, c); r.wrid != 1 || r.code != 0 || r.length != 4096 {
		t.Fatalf("READ A: %+v", r)
	}
	if _, err := io.ReadFull(c, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	revoked := make(chan error, 1)
	go func() { revoked <- p.regB.Revoke(cutCtx(t), hA) }()
	for p.regB.RemoteErr(rA) == nil {
		time.Sleep(time.Millisecond)
	}
	if r := readResp(t, c); r.wrid != 2 || r.code != 0 || r.length != nB {
		t.Fatalf("READ B: %+v", r)
	}
	got := make([]byte, nB)
	var revokedBefore bool
	for n := 0; n < nB; {
		k, err := io.ReadFull(c, got[n:min(nB, n+64<<10)])
		n += k
		if err != nil {
			t.Fatalf("READ B after A's revocation: cut after %d of %d bytes: %v", n, nB, err)
		}
		select {
		case err := <-revoked:
			if err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			revokedBefore, revoked = n < nB, nil
		default:
		}
		time.Sleep(10 * time.Millisecond) // a peer that reads
	}
	if !bytes.Equal(got, memB) {
		t.Fatalf("READ B: wrong bytes (first diff at %d)", backendtest.FirstDiff(got, memB))
	}
	if !revokedBefore {
		t.Fatal("Revoke of A waited for the rest of the batch (B) to be read")
	}
}

// A READ's answer does not wait in the batch while the server waits on
// the peer for something else (here the payload of a refused WRITE): it
// goes out first, so a revocation of its region is not held by the peer.
func TestAnswerLeavesBeforeTheServerWaits(t *testing.T) {
	p := newPair(t, Config{}, Config{FrameTimeout: 10 * time.Minute})
	hA, memA := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	hW, memW := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, memA)
	beforeW := bytes.Clone(memW)
	c := authed(t, p.b)
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	bad := hW.Key
	bad[0] ^= 1
	// The READ, then a WRITE with a wrong key whose payload the peer holds
	// back: the server drains it (it must, to stay in step) once it comes.
	writeRaw(t, c, append(reqBytes(reqHeader{op: opRead, length: 4096, wrid: 1, region: hA.Region, key: hA.Key}),
		reqBytes(reqHeader{op: opWrite, length: 4096, wrid: 2, region: hW.Region, key: bad})...))
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second)) // the answer once waited for the WRITE's payload
	if r := readResp(t, c); r.wrid != 1 || r.code != 0 || r.length != 4096 {
		t.Fatalf("READ: %+v", r)
	}
	got := make([]byte, 4096)
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, memA) {
		t.Fatalf("READ's payload: %v", err)
	}
	if err := p.regB.Revoke(cutCtx(t), hA); err != nil {
		t.Fatalf("Revoke of the READ's region while the server waits for another frame's payload: %v", err)
	}
	writeRaw(t, c, make([]byte, 4096))
	if r := readResp(t, c); r.wrid != 2 || r.code == 0 {
		t.Fatalf("WRITE with a wrong key: %+v", r)
	}
	backendtest.AssertSame(t, "the refused WRITE's region", memW, beforeW)
	writeRaw(t, c, reqBytes(reqHeader{op: opRead, length: 4096, wrid: 3, region: hW.Region, key: hW.Key}))
	if r := readResp(t, c); r.wrid != 3 || r.code != 0 || r.length != 4096 {
		t.Fatalf("next READ on the connection: %+v", r)
	}
}

// After cutLeft let a READ's reference go (its bytes were out), a later
// cut of the READ after it in the same batch still counts those bytes:
// Revoke of the second returns only once none of its memory is still to
// be written. (The offsets once left the first one's payload out, so the
// second's reference went early and the writev went on reading memory its
// owner had been told was free.)
func TestCutLeftKeepsLaterOffsets(t *testing.T) {
	p := newPair(t, Config{}, Config{FrameTimeout: 10 * time.Minute, SocketBuffer: 16 << 10})
	const nA = 1<<20 - 8192
	const nB = 4 << 20
	hA, _ := backendtest.Alloc(t, p.regB, nA, buffer.AccessReadWrite)
	hB, memB := backendtest.Alloc(t, p.regB, nB, buffer.AccessReadWrite)
	backendtest.Random(t, memB)
	orig := bytes.Clone(memB)
	rB := regionOf(t, p.regB, hB)
	c := authed(t, p.b)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(16 << 10)
	}
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	writeRaw(t, c, append(reqBytes(reqHeader{op: opRead, length: nA, wrid: 1, region: hA.Region, key: hA.Key}),
		reqBytes(reqHeader{op: opRead, length: nB, wrid: 2, region: hB.Region, key: hB.Key})...))
	if r := readResp(t, c); r.wrid != 1 || r.code != 0 || r.length != nA {
		t.Fatalf("READ A: %+v", r)
	}
	if _, err := io.ReadFull(c, make([]byte, nA)); err != nil {
		t.Fatal(err)
	}
	// A's bytes are out: its revocation lets its reference go (cutLeft).
	if err := p.regB.Revoke(cutCtx(t), hA); err != nil {
		t.Fatal(err)
	}
	if r := readResp(t, c); r.wrid != 2 || r.code != 0 || r.length != nB {
		t.Fatalf("READ B: %+v", r)
	}
	got := make([]byte, nB)
	const stop = nB - 512<<10
	if _, err := io.ReadFull(c, got[:stop]); err != nil {
		t.Fatal(err)
	}
	// The peer stops reading B; B is revoked: the write may not go on
	// from B's memory once Revoke returned (the connection closes).
	revoked := make(chan error, 1)
	go func() { revoked <- p.regB.Revoke(cutCtx(t), hB) }()
	for p.regB.RemoteErr(rB) == nil {
		time.Sleep(time.Millisecond)
	}
	if err := <-revoked; err != nil {
		t.Fatal(err)
	}
	for i := range memB { // the owner reuses the memory
		memB[i] = 0xAA
	}
	n, _ := io.ReadFull(c, got[stop:])
	if d := backendtest.FirstDiff(got[stop:stop+n], orig[stop:stop+n]); d >= 0 {
		t.Fatalf("the peer got bytes written into B's memory after Revoke(B) returned (first at B's offset %d)", stop+d)
	}
}
