package tcp

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// The initiator's frames of write-imm and send, seen by a fake server:
// they all go on the lane (the route's first connection) in posting
// order; a write-imm larger than a chunk is plain writes then one
// write-imm naming the whole range; a payload cut short by a deadline
// ends with an abort trailer.

func TestLaneFrames(t *testing.T) {
	f := newFakeServer(t)
	cfg := fastWatchdog()
	cfg.ChunkSize, cfg.ConnsPerRoute = 4096, 2
	cfg.HeartbeatInterval = time.Second // the idle connection's ping ends the test
	a, regA := newBackend(t, cfg, backendtest.OwnerA)
	rt := f.connect(t, a)
	lane, other := f.accept(t), f.accept(t)
	_, local := backendtest.Alloc(t, regA, 10000, buffer.AccessReadWrite)
	backendtest.Random(t, local)
	remote := fakeRemote(20000)
	remote.Offset = 100
	remote.Length = 10000
	rec := backendtest.NewRecorder(2)
	wi := &backend.WorkRequest{Op: backend.OpWriteImm, Local: local, Remote: remote, Imm: 77, Deadline: time.Now().Add(waitTimeout), Done: rec}
	send := &backend.WorkRequest{Op: backend.OpSend, Local: local[:5000], Imm: 3, HasImm: true, Deadline: time.Now().Add(waitTimeout), Done: rec}
	for _, wr := range []*backend.WorkRequest{wi, send} {
		if err := rt.Post(wr); err != nil {
			t.Fatalf("post %s: %v", wr.Op, err)
		}
	}
	type want struct {
		op          byte
		off, length int
	}
	for _, w := range []want{{opWrite, 0, 4096}, {opWrite, 4096, 4096}, {opWriteImm, 8192, 1808}, {opSend, 0, 5000}} {
		h := lane.readReq(t)
		for h.op == opPing { // a heartbeat on a slow machine: answered, skipped
			lane.respond(t, respHeader{op: opPing, wrid: h.wrid}, nil)
			h = lane.readReq(t)
		}
		if h.op != w.op || int(h.length) != w.length || (w.op != opSend && h.offset != uint64(100+w.off)) {
			t.Fatalf("frame %+v, want op %d of %d bytes at %d", h, w.op, w.length, 100+w.off)
		}
		switch w.op {
		case opWriteImm:
			if h.total != 10000 || h.imm != 77 {
				t.Fatalf("write-imm frame %+v: want total 10000, imm 77", h)
			}
		case opSend:
			if h.region != 0 || h.key != (buffer.Key{}) || !h.hasImm || h.imm != 3 {
				t.Fatalf("send frame %+v", h)
			}
		}
		backendtest.AssertSame(t, "payload", lane.readPayload(t, w.length), local[w.off:w.off+w.length])
		if hasTrailer(w.op) {
			if tr := lane.readPayload(t, trailerSize); tr[0] != trailerCommit {
				t.Fatalf("trailer %#x, want commit", tr[0])
			}
		}
		lane.respond(t, respHeader{op: w.op, wrid: h.wrid}, nil)
	}
	for range 2 {
		if res := rec.Wait(t, waitTimeout); res.Err != nil {
			t.Fatalf("%s: %v", res.WR.Op, res.Err)
		}
	}
	// The other connection carried none of it: its next frame is a ping.
	if h := other.readReq(t); h.op != opPing {
		t.Fatalf("frame on the other connection: %+v", h)
	}
}

// A deadline in the middle of a write-imm's or send's payload: the rest
// of the payload goes out as zeros and the trailer aborts, so the owner
// delivers nothing; the next one commits.
func TestStallMidLanePayload(t *testing.T) {
	for _, op := range []backend.Op{backend.OpWriteImm, backend.OpSend} {
		t.Run(op.String(), func(t *testing.T) {
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
			remote := fakeRemote(n)
			remote.Access |= buffer.AccessNotify
			if op == backend.OpSend {
				remote = buffer.Buffer{}
			}
			rec := backendtest.NewRecorder(1)
			wr := &backend.WorkRequest{Op: op, Local: local, Remote: remote, Imm: 1, Deadline: time.Now().Add(150 * time.Millisecond), Done: rec}
			if err := rt.Post(wr); err != nil {
				t.Fatalf("post: %v", err)
			}
			h := sc.readReq(t)
			if res := rec.Wait(t, waitTimeout); !errors.Is(res.Err, rdmamgr.ErrDeadline) {
				t.Fatalf("stalled %s completed with %v, want ErrDeadline", op, res.Err)
			}
			payload := sc.readPayload(t, n)
			if bytes.Count(payload, []byte{0x11})+bytes.Count(payload, []byte{0}) != n {
				t.Fatal("payload holds bytes that are neither the op's nor zeros")
			}
			if tr := sc.readPayload(t, trailerSize); tr[0] != trailerAbort {
				t.Fatalf("trailer %#x after a payload cut short, want abort", tr[0])
			}
			sc.respond(t, respHeader{op: h.op, code: codeAborted, wrid: h.wrid}, nil) // late: dropped
			assertUp(t, rt)

			next := &backend.WorkRequest{Op: op, Local: local[:100], Remote: remote, Imm: 2, Deadline: time.Now().Add(waitTimeout), Done: rec}
			if op == backend.OpWriteImm {
				next.Remote.Length = 100
			}
			if err := rt.Post(next); err != nil {
				t.Fatalf("post after the stall: %v", err)
			}
			h2 := sc.readReq(t)
			sc.readPayload(t, 100)
			if tr := sc.readPayload(t, trailerSize); tr[0] != trailerCommit {
				t.Fatalf("trailer %#x of a whole payload, want commit", tr[0])
			}
			sc.respond(t, respHeader{op: h2.op, wrid: h2.wrid}, nil)
			if res := rec.Wait(t, waitTimeout); res.WR != next || res.Err != nil {
				t.Fatalf("%s after the stall: %v", op, res.Err)
			}
			assertUp(t, rt)
		})
	}
}

// An atomic's answer sets Result; a refused one leaves it alone.
func TestAtomicResult(t *testing.T) {
	f := newFakeServer(t)
	a, _ := newBackend(t, fastWatchdog(), backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	word := fakeRemote(8)
	word.Access |= buffer.AccessAtomic
	rec := backendtest.NewRecorder(1)
	for _, code := range []byte{0, byte(backend.Code(rdmamgr.ErrAccess))} {
		wr := &backend.WorkRequest{Op: backend.OpCompareSwap, Remote: word, Compare: 5, Swap: 6, Result: 99, Deadline: time.Now().Add(waitTimeout), Done: rec}
		if err := rt.Post(wr); err != nil {
			t.Fatal(err)
		}
		h := sc.readReq(t)
		if h.op != opCompareSwap || h.length != 8 || h.compare != 5 || h.swap != 6 {
			t.Fatalf("request %+v", h)
		}
		var value uint64
		if code == 0 {
			value = 0xABCDEF
		}
		sc.respond(t, respHeader{op: opCompareSwap, code: code, wrid: h.wrid, value: value}, nil)
		res := rec.Wait(t, waitTimeout)
		switch {
		case code == 0 && (res.Err != nil || wr.Result != 0xABCDEF):
			t.Fatalf("compare-swap: %v, result %#x", res.Err, wr.Result)
		case code != 0 && (!errors.Is(res.Err, rdmamgr.ErrAccess) || wr.Result != 99):
			t.Fatalf("refused compare-swap: %v, result %#x", res.Err, wr.Result)
		}
	}
	assertUp(t, rt)
}
