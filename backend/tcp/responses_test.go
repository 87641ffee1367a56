package tcp

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// Responses a genuine server never sends: they fail the route, never an
// op whose memory a loop may still be touching.

// Responses that do not match what was asked fail the route with
// ErrProtocol, and whatever was in flight with it.
func TestBadResponses(t *testing.T) {
	cases := []struct {
		name    string
		op      backend.Op
		respond func(t *testing.T, sc *fakeConn, h reqHeader)
	}{
		{"unknown wrid", backend.OpWrite, func(t *testing.T, sc *fakeConn, h reqHeader) {
			sc.respond(t, respHeader{op: opWrite, wrid: h.wrid + 100}, nil)
		}},
		{"op mismatch", backend.OpRead, func(t *testing.T, sc *fakeConn, h reqHeader) {
			sc.respond(t, respHeader{op: opWrite, wrid: h.wrid}, nil)
		}},
		{"read ok without payload", backend.OpRead, func(t *testing.T, sc *fakeConn, h reqHeader) {
			sc.respond(t, respHeader{op: opRead, wrid: h.wrid}, nil)
		}},
		{"read payload length mismatch", backend.OpRead, func(t *testing.T, sc *fakeConn, h reqHeader) {
			sc.respond(t, respHeader{op: opRead, length: h.length - 1, wrid: h.wrid}, make([]byte, h.length-1))
		}},
		{"response flag missing", backend.OpWrite, func(t *testing.T, sc *fakeConn, h reqHeader) {
			b := make([]byte, respHeaderSize)
			(&respHeader{op: opWrite, wrid: h.wrid}).encode(b)
			b[0] &^= respFlag
			sc.writeRaw(t, b)
		}},
		{"payload on write response", backend.OpWrite, func(t *testing.T, sc *fakeConn, h reqHeader) {
			sc.respond(t, respHeader{op: opWrite, length: 10, wrid: h.wrid}, make([]byte, 10))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeServer(t)
			a, regA := newBackend(t, fastWatchdog(), backendtest.OwnerA)
			rt := f.connect(t, a)
			sc := f.accept(t)
			const n = 4096
			_, local := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
			pattern := bytes.Repeat([]byte{0x77}, n)
			copy(local, pattern)
			rec := backendtest.NewRecorder(1)
			if err := rt.Post(&backend.WorkRequest{Op: tc.op, Local: local, Remote: fakeRemote(n),
				Deadline: time.Now().Add(waitTimeout), Done: rec}); err != nil {
				t.Fatalf("post: %v", err)
			}
			h := sc.readReq(t)
			if tc.op == backend.OpWrite {
				sc.readPayload(t, int(h.length))
			}
			tc.respond(t, sc, h)
			if res := rec.Wait(t, waitTimeout); !errors.Is(res.Err, rdmamgr.ErrProtocol) {
				t.Fatalf("completed with %v, want ErrProtocol", res.Err)
			}
			assertFailed(t, rt, rdmamgr.ErrProtocol)
			if tc.op == backend.OpRead {
				backendtest.AssertSame(t, "local memory", local, pattern)
			}
		})
	}
}

// earlyConfig makes a WRITE's payload far larger than what the sockets can
// buffer, so the writer is still sending it when an early response comes.
func earlyConfig() Config {
	cfg := fastWatchdog()
	cfg.ChunkSize, cfg.MaxFrameLen = 32<<20, 32<<20
	cfg.SocketBuffer = 64 << 10
	return cfg
}

// A peer that answers a WRITE before reading its payload must not make the
// op complete while the writer still reads the local memory: the poster
// may reuse it at once, and the peer would then receive the new contents.
func TestEarlyWriteResponseWaitsForWriter(t *testing.T) {
	f := newFakeServer(t)
	a, regA := newBackend(t, earlyConfig(), backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	_ = sc.c.(*net.TCPConn).SetReadBuffer(64 << 10)
	const n = 32 << 20
	_, local := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	backendtest.Random(t, local)
	sent := bytes.Clone(local)
	rec := backendtest.NewRecorder(1)
	if err := rt.Post(&backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(n),
		Deadline: time.Now().Add(waitTimeout), Done: rec}); err != nil {
		t.Fatalf("post: %v", err)
	}
	h := sc.readReq(t)
	sc.respond(t, respHeader{op: opWrite, wrid: h.wrid}, nil) // before reading the payload

	type got struct {
		p   []byte
		err error
	}
	payload := make(chan got, 1)
	go func() {
		p, err := sc.tryReadPayload(n)
		payload <- got{p, err}
	}()
	res := rec.Wait(t, waitTimeout)
	if res.Err != nil {
		t.Fatalf("write: %v", res.Err)
	}
	// The poster reuses its memory as soon as the op completed.
	for i := range local {
		local[i] = 0xEE
	}
	var g got
	select {
	case g = <-payload:
	case <-time.After(waitTimeout):
		t.Fatal("payload not received")
	}
	if g.err != nil {
		t.Fatal(g.err)
	}
	if i := backendtest.FirstDiff(g.p, sent); i >= 0 {
		t.Fatalf("the peer received memory written after completion (first at byte %d of %d: %#x)", i, n, g.p[i])
	}
	assertUp(t, rt)
}

// A response for a request that was never sent (here: queued behind a large
// WRITE) is a protocol error; it must not complete the queued op, whose
// memory the writer would still send later.
func TestResponseBeforeRequestSent(t *testing.T) {
	f := newFakeServer(t)
	a, regA := newBackend(t, earlyConfig(), backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	_ = sc.c.(*net.TCPConn).SetReadBuffer(64 << 10)
	const n = 32 << 20
	_, local := backendtest.Alloc(t, regA, n+16, buffer.AccessReadWrite)
	rec := backendtest.NewRecorder(2)
	big := &backend.WorkRequest{Op: backend.OpWrite, Local: local[:n], Remote: fakeRemote(n),
		Deadline: time.Now().Add(waitTimeout), Done: rec}
	small := &backend.WorkRequest{Op: backend.OpWrite, Local: local[n:], Remote: fakeRemote(16),
		Deadline: time.Now().Add(waitTimeout), Done: rec}
	for _, wr := range []*backend.WorkRequest{big, small} {
		if err := rt.Post(wr); err != nil {
			t.Fatalf("post: %v", err)
		}
	}
	h := sc.readReq(t)
	// Guess the next wrid on the connection and answer it early.
	sc.respond(t, respHeader{op: opWrite, wrid: h.wrid + 1}, nil)
	for range 2 {
		res := rec.Wait(t, waitTimeout)
		if !errors.Is(res.Err, rdmamgr.ErrProtocol) {
			which := "big"
			if res.WR == small {
				which = "small (never sent)"
			}
			t.Fatalf("%s write completed with %v, want ErrProtocol", which, res.Err)
		}
	}
	assertFailed(t, rt, rdmamgr.ErrProtocol)
}
