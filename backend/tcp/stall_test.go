package tcp

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// Stalls and cuts in the middle of a payload: the op ends only after the
// loop touching its memory let go of it, and the route keeps serving.

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
	if !errors.Is(res.Err, rdmamgr.ErrDeadline) {
		t.Fatalf("stalled read completed with %v, want ErrDeadline", res.Err)
	}
	for _, g := range strings.Split(rec.stacks, "\n\n") {
		if strings.Contains(g, "(*clientConn).readPayload") && strings.Contains(g, "(*connReader).Read(") {
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

// slowReader connects a route of cfg, with 64 KiB socket buffers, to a
// fake server that reads only as the test does, and returns n bytes of
// the initiator's memory filled with 0x11.
func slowReader(t *testing.T, cfg Config, n int) (backend.Route, *fakeConn, []byte) {
	t.Helper()
	f := newFakeServer(t)
	cfg.SocketBuffer = 64 << 10
	a, regA := newBackend(t, cfg, backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	_, local := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	for i := range local {
		local[i] = 0x11
	}
	return rt, sc, local
}

// A server that stops reading in the middle of a WRITE payload (the
// socket buffers fill and writev blocks): the deadline interrupts the
// write, the rest of the frame goes out as zeros, never as bytes the
// poster writes after the op was reported, and the route keeps serving.
func TestStallMidWritePayload(t *testing.T) {
	const n = 32 << 20 // far more than the socket buffers hold
	cfg := fastWatchdog()
	cfg.ChunkSize, cfg.MaxFrameLen = n, n
	rt, sc, local := slowReader(t, cfg, n)
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
	if res := rec.Wait(t, waitTimeout); !errors.Is(res.Err, rdmamgr.ErrDeadline) {
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

			if res := rec.Wait(t, waitTimeout); !errors.Is(res.Err, rdmamgr.ErrPeerGone) {
				t.Fatalf("completed with %v, want ErrPeerGone", res.Err)
			}
			assertFailed(t, rt, rdmamgr.ErrPeerGone)
			err := rt.Post(&backend.WorkRequest{Op: op, Local: local[:10], Remote: fakeRemote(10),
				Deadline: time.Now().Add(waitTimeout), Done: rec})
			if !errors.Is(err, rdmamgr.ErrPeerGone) {
				t.Fatalf("post after failure: %v, want ErrPeerGone", err)
			}
			rec.None(t)
			if st := rt.Stats(); st.Errors != 1 || st.Ops != 0 || st.InFlight != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// Two WRITEs of one batch from the same memory (one buffer sent to two
// places), the writev blocked by a server that reads slowly: the first's
// deadline interrupts the write and its unwritten payload goes out as
// zeros, and the second's payload, the same bytes of the same memory,
// goes out whole. Before, every loaned payload that ended at the
// cancelled one's last byte was swapped for zeros, and the second was
// reported done with zeros at its destination.
func TestUnloanSparesSharedMemory(t *testing.T) {
	const n = 1 << 20
	rt, sc, local := slowReader(t, fastWatchdog(), n)
	rec := backendtest.NewRecorder(2)
	victim := &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(n),
		Deadline: time.Now().Add(150 * time.Millisecond), Done: rec}
	neighbour := &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(n),
		Deadline: time.Now().Add(time.Hour), Done: rec}
	if k, err := rt.(backend.ListPoster).PostList([]*backend.WorkRequest{victim, neighbour}); k != 2 || err != nil {
		t.Fatalf("PostList = %d, %v", k, err)
	}
	h1 := sc.readReq(t)
	if res := rec.Wait(t, waitTimeout); res.WR != victim || !errors.Is(res.Err, rdmamgr.ErrDeadline) {
		t.Fatalf("first completion: %v for the neighbour %v; want the stalled one with ErrDeadline", res.Err, res.WR == neighbour)
	}
	p1 := sc.readPayload(t, n)
	if bytes.Count(p1, []byte{0x11})+bytes.Count(p1, []byte{0}) != n {
		t.Fatal("the stalled payload holds bytes that are neither its own nor zeros")
	}
	h2 := sc.readReq(t)
	if h2.op != opWrite || h2.length != n {
		t.Fatalf("second request %+v", h2)
	}
	if p2 := sc.readPayload(t, n); bytes.Count(p2, []byte{0x11}) != n {
		t.Fatalf("the neighbour's payload: %d of %d bytes its own (zeros in place of the rest)", bytes.Count(p2, []byte{0x11}), n)
	}
	sc.respond(t, respHeader{op: opWrite, wrid: h1.wrid}, nil) // late: dropped
	sc.respond(t, respHeader{op: opWrite, wrid: h2.wrid}, nil)
	if res := rec.Wait(t, waitTimeout); res.WR != neighbour || res.Err != nil {
		t.Fatalf("the neighbour: %v", res.Err)
	}
	assertUp(t, rt)
}
