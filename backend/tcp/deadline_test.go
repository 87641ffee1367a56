package tcp

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/backendtest"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// fastWatchdog is the initiator config of the deadline tests.
func fastWatchdog() Config {
	return Config{ConnsPerRoute: 1, WatchdogInterval: 5 * time.Millisecond}
}

func assertUp(t *testing.T, rt backend.Route) {
	t.Helper()
	select {
	case <-rt.Done():
		t.Fatalf("route failed: %v", rt.Err())
	default:
	}
	if err := rt.Err(); err != nil {
		t.Fatalf("route Err = %v while up", err)
	}
}

func assertFailed(t *testing.T, rt backend.Route, want error) {
	t.Helper()
	select {
	case <-rt.Done():
	case <-time.After(waitTimeout):
		t.Fatalf("route Done not closed")
	}
	if err := rt.Err(); !errors.Is(err, want) {
		t.Fatalf("route Err = %v, want %v", err, want)
	}
}

// An op whose response never comes fails with ErrDeadline; the route stays
// up, and the late response, when it comes, is dropped.
func TestDeadlineNoResponse(t *testing.T) {
	f := newFakeServer(t)
	a, regA := newBackend(t, fastWatchdog(), backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	_, local := backendtest.Alloc(t, regA, 1000, buffer.AccessReadWrite)
	rec := backendtest.NewRecorder(2)

	first := &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(1000),
		Deadline: time.Now().Add(100 * time.Millisecond), Done: rec}
	if err := rt.Post(first); err != nil {
		t.Fatalf("post: %v", err)
	}
	h1 := sc.readReq(t)
	sc.readPayload(t, int(h1.length))
	res := rec.Wait(t, waitTimeout)
	if res.WR != first || !errors.Is(res.Err, backend.ErrDeadline) {
		t.Fatalf("unanswered write completed with %v, want ErrDeadline", res.Err)
	}
	assertUp(t, rt)

	second := &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(1000),
		Deadline: time.Now().Add(waitTimeout), Done: rec}
	if err := rt.Post(second); err != nil {
		t.Fatalf("post: %v", err)
	}
	h2 := sc.readReq(t)
	sc.readPayload(t, int(h2.length))
	sc.respond(t, respHeader{op: opWrite, wrid: h1.wrid}, nil) // late
	sc.respond(t, respHeader{op: opWrite, wrid: h2.wrid}, nil)
	res = rec.Wait(t, waitTimeout)
	if res.WR != second || res.Err != nil {
		t.Fatalf("second write: %v (same wr: %v)", res.Err, res.WR == second)
	}
	rec.None(t)
	assertUp(t, rt)
	if st := rt.Stats(); st.Ops != 1 || st.Errors != 1 || st.InFlight != 0 {
		t.Fatalf("stats %+v, want 1 op, 1 error", st)
	}
}

// A READ whose response arrives after its deadline must not write into the
// local buffer: the memory was handed back to the poster.
func TestLateReadDoesNotTouchMemory(t *testing.T) {
	f := newFakeServer(t)
	a, regA := newBackend(t, fastWatchdog(), backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	const n = 64 << 10
	_, local := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	_, other := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	pattern := bytes.Repeat([]byte{0x5A}, n)
	copy(local, pattern)
	rec := backendtest.NewRecorder(2)

	late := &backend.WorkRequest{Op: backend.OpRead, Local: local, Remote: fakeRemote(n),
		Deadline: time.Now().Add(100 * time.Millisecond), Done: rec}
	if err := rt.Post(late); err != nil {
		t.Fatalf("post: %v", err)
	}
	h1 := sc.readReq(t)
	if h1.op != opRead || h1.length != n {
		t.Fatalf("request %+v", h1)
	}
	if res := rec.Wait(t, waitTimeout); !errors.Is(res.Err, backend.ErrDeadline) {
		t.Fatalf("late read completed with %v, want ErrDeadline", res.Err)
	}
	// The memory is the poster's again; the server answers now.
	sc.respond(t, respHeader{op: opRead, length: n, wrid: h1.wrid}, bytes.Repeat([]byte{0xC3}, n))

	// Responses are read in order: once a second read completed, the late
	// payload has been consumed (and must have been dropped).
	want := backendtest.RandomData(t, n)
	next := &backend.WorkRequest{Op: backend.OpRead, Local: other, Remote: fakeRemote(n),
		Deadline: time.Now().Add(waitTimeout), Done: rec}
	if err := rt.Post(next); err != nil {
		t.Fatalf("post: %v", err)
	}
	h2 := sc.readReq(t)
	sc.respond(t, respHeader{op: opRead, length: n, wrid: h2.wrid}, want)
	if res := rec.Wait(t, waitTimeout); res.WR != next || res.Err != nil {
		t.Fatalf("second read: %v", res.Err)
	}
	backendtest.AssertSame(t, "local memory of the expired read", local, pattern)
	backendtest.AssertSame(t, "second read", other, want)
	assertUp(t, rt)
}

// stackRecorder captures every goroutine's stack when the op completes.
type stackRecorder struct {
	ch     chan backendtest.Result
	stacks string
}

func (s *stackRecorder) Complete(wr *backend.WorkRequest, err error) {
	buf := make([]byte, 1<<20)
	s.stacks = string(buf[:runtime.Stack(buf, true)])
	s.ch <- backendtest.Result{WR: wr, Err: err}
}

// A server that stalls in the middle of a READ payload: the reader is
// writing the chunk's memory, so the deadline interrupts its read. The op
// completes with ErrDeadline only after the reader stopped touching the
// memory; the rest of the payload, when it comes, goes to a sink; the
// route stays up and serves the next op on the same connection.
func TestStallMidPayload(t *testing.T) {
	f := newFakeServer(t)
	a, regA := newBackend(t, fastWatchdog(), backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	const n, sent = 256 << 10, 100 << 10
	_, local := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	rec := &stackRecorder{ch: make(chan backendtest.Result, 1)}
	wr := &backend.WorkRequest{Op: backend.OpRead, Local: local, Remote: fakeRemote(n),
		Deadline: time.Now().Add(150 * time.Millisecond), Done: rec}
	if err := rt.Post(wr); err != nil {
		t.Fatalf("post: %v", err)
	}
	h := sc.readReq(t)
	sc.respond(t, respHeader{op: opRead, length: n, wrid: h.wrid}, backendtest.RandomData(t, sent)) // and stall

	var res backendtest.Result
	select {
	case res = <-rec.ch:
	case <-time.After(waitTimeout):
		t.Fatal("stalled read never completed")
	}
	if !errors.Is(res.Err, backend.ErrDeadline) {
		t.Fatalf("stalled read completed with %v, want ErrDeadline", res.Err)
	}
	for _, g := range strings.Split(rec.stacks, "\n\n") {
		if strings.Contains(g, "(*clientConn).readPayload") && strings.Contains(g, "bufio.(*Reader).Read(") {
			t.Fatalf("op completed while the reader was still reading into its memory:\n%s", g)
		}
	}
	// The memory is the poster's again: it writes a pattern, the server
	// sends the rest of the payload, and the pattern must survive.
	pattern := bytes.Repeat([]byte{0x5A}, n)
	copy(local, pattern)
	sc.writeRaw(t, bytes.Repeat([]byte{0xC3}, n-sent))
	assertUp(t, rt)

	// The same connection serves the next op (the late payload was drained).
	_, other := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	want := backendtest.RandomData(t, n)
	rec2 := backendtest.NewRecorder(1)
	next := &backend.WorkRequest{Op: backend.OpRead, Local: other, Remote: fakeRemote(n),
		Deadline: time.Now().Add(waitTimeout), Done: rec2}
	if err := rt.Post(next); err != nil {
		t.Fatalf("post after the stall: %v", err)
	}
	h2 := sc.readReq(t)
	sc.respond(t, respHeader{op: opRead, length: n, wrid: h2.wrid}, want)
	if res := rec2.Wait(t, waitTimeout); res.Err != nil {
		t.Fatalf("read after the stall: %v", res.Err)
	}
	backendtest.AssertSame(t, "second read", other, want)
	backendtest.AssertSame(t, "memory of the expired read", local, pattern)
	assertUp(t, rt)
}

// A server that stops reading in the middle of a WRITE payload (the
// socket buffers fill and writev blocks): the deadline interrupts the
// write, the rest of the frame goes out as zeros, never as bytes the
// poster writes after the op was reported, and the route keeps serving.
func TestStallMidWritePayload(t *testing.T) {
	f := newFakeServer(t)
	cfg := fastWatchdog()
	const n = 32 << 20 // far more than the socket buffers hold
	cfg.ChunkSize, cfg.MaxFrameLen, cfg.SocketBuffer = n, n, 64<<10
	a, regA := newBackend(t, cfg, backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	_, local := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	for i := range local {
		local[i] = 0x11
	}
	rec := backendtest.NewRecorder(1)
	wr := &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(n),
		Deadline: time.Now().Add(150 * time.Millisecond), Done: rec}
	if err := rt.Post(wr); err != nil {
		t.Fatalf("post: %v", err)
	}
	h := sc.readReq(t)
	if h.op != opWrite || h.length != n {
		t.Fatalf("request %+v", h)
	}
	if res := rec.Wait(t, waitTimeout); !errors.Is(res.Err, backend.ErrDeadline) {
		t.Fatalf("stalled write completed with %v, want ErrDeadline", res.Err)
	}
	// Reported: the memory is the poster's. Bytes it writes now must never
	// reach the wire.
	for i := range local {
		local[i] = 0xEE
	}
	payload := sc.readPayload(t, n)
	if i := bytes.IndexByte(payload, 0xEE); i >= 0 {
		t.Fatalf("byte %d of the payload was read from memory after the op was reported", i)
	}
	if bytes.Count(payload, []byte{0x11})+bytes.Count(payload, []byte{0}) != n {
		t.Fatal("payload holds bytes that are neither the op's nor zeros")
	}
	sc.respond(t, respHeader{op: opWrite, wrid: h.wrid}, nil) // late: dropped
	assertUp(t, rt)

	small := local[:4096]
	rec2 := backendtest.NewRecorder(1)
	next := &backend.WorkRequest{Op: backend.OpWrite, Local: small, Remote: fakeRemote(4096),
		Deadline: time.Now().Add(waitTimeout), Done: rec2}
	if err := rt.Post(next); err != nil {
		t.Fatalf("post after the stall: %v", err)
	}
	h2 := sc.readReq(t)
	sc.readPayload(t, 4096)
	sc.respond(t, respHeader{op: opWrite, wrid: h2.wrid}, nil)
	if res := rec2.Wait(t, waitTimeout); res.WR != next || res.Err != nil {
		t.Fatalf("write after the stall: %v", res.Err)
	}
	rec.None(t)
	assertUp(t, rt)
}

// A server that closes the connection in the middle of a transfer: the op
// fails with ErrPeerGone, the route is down and refuses new work.
func TestServerClosesMidTransfer(t *testing.T) {
	const n = 8 << 20
	for _, op := range []backend.Op{backend.OpRead, backend.OpWrite} {
		t.Run(op.String(), func(t *testing.T) {
			f := newFakeServer(t)
			cfg := fastWatchdog()
			cfg.ChunkSize, cfg.MaxFrameLen = n, n
			a, regA := newBackend(t, cfg, backendtest.OwnerA)
			rt := f.connect(t, a)
			sc := f.accept(t)
			_, local := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
			backendtest.Random(t, local)
			rec := backendtest.NewRecorder(1)
			wr := &backend.WorkRequest{Op: op, Local: local, Remote: fakeRemote(n),
				Deadline: time.Now().Add(waitTimeout), Done: rec}
			if err := rt.Post(wr); err != nil {
				t.Fatalf("post: %v", err)
			}
			h := sc.readReq(t)
			if op == backend.OpRead {
				sc.respond(t, respHeader{op: opRead, length: h.length, wrid: h.wrid}, make([]byte, 4096))
			} else {
				sc.readPayload(t, 4096)
			}
			sc.c.Close()

			if res := rec.Wait(t, waitTimeout); !errors.Is(res.Err, backend.ErrPeerGone) {
				t.Fatalf("completed with %v, want ErrPeerGone", res.Err)
			}
			assertFailed(t, rt, backend.ErrPeerGone)
			err := rt.Post(&backend.WorkRequest{Op: op, Local: local[:10], Remote: fakeRemote(10),
				Deadline: time.Now().Add(waitTimeout), Done: rec})
			if !errors.Is(err, backend.ErrPeerGone) {
				t.Fatalf("post after failure: %v, want ErrPeerGone", err)
			}
			rec.None(t)
			if st := rt.Stats(); st.Errors != 1 || st.Ops != 0 || st.InFlight != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

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
			if res := rec.Wait(t, waitTimeout); !errors.Is(res.Err, backend.ErrProtocol) {
				t.Fatalf("completed with %v, want ErrProtocol", res.Err)
			}
			assertFailed(t, rt, backend.ErrProtocol)
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
		if !errors.Is(res.Err, backend.ErrProtocol) {
			which := "big"
			if res.WR == small {
				which = "small (never sent)"
			}
			t.Fatalf("%s write completed with %v, want ErrProtocol", which, res.Err)
		}
	}
	assertFailed(t, rt, backend.ErrProtocol)
}
