package tcp

import (
	"bytes"
	"encoding/binary"
	"math"
	"net"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Hostile write-imm, send and atomic frames on a raw connection: a
// request that fails its checks is answered with its code, changes
// nothing it may not and delivers nothing; a malformed one closes the
// connection; the backend serves on either way.

const accessAll = buffer.AccessReadWrite | buffer.AccessNotify | buffer.AccessAtomic

// verbFrame is a request with its payload and, for a write-imm or send,
// its trailer.
func verbFrame(h reqHeader, payload []byte, trailer byte) []byte {
	b := reqBytes(h)
	if hasPayload(h.op) {
		b = append(b, payload...)
	}
	if hasTrailer(h.op) {
		b = append(b, trailer)
	}
	return b
}

func TestRawVerbRefusals(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	h, mem := backendtest.Alloc(t, p.regB, 4096, accessAll)
	rw, rwMem := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	raw := make([]byte, 4096+8)
	oddMem := raw[1 : 4096+1]
	odd, err := p.regB.Register(oddMem, accessAll)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range [][]byte{mem, rwMem, oddMem} {
		backendtest.Random(t, m)
	}
	before, rwBefore, oddBefore := bytes.Clone(mem), bytes.Clone(rwMem), bytes.Clone(oddMem)
	badKey := h.Key
	badKey[3] ^= 1
	payload := bytes.Repeat([]byte{0xEE}, 64)
	c := authed(t, p.b)

	// Before SetInbox: a send is refused and its payload drained.
	writeRaw(t, c, verbFrame(reqHeader{op: opSend, length: 64, wrid: 1}, payload, trailerCommit))
	if r := readResp(t, c); rdmapb.Code(r.code) != rdmapb.Code_NO_RECEIVE || r.wrid != 1 {
		t.Fatalf("send without an inbox: %+v", r)
	}
	in := backendtest.NewInbox(p.regB, 4, 4)
	p.b.SetInbox(in)
	t.Cleanup(in.Close)

	cases := []struct {
		name string
		req  reqHeader
		want rdmapb.Code
	}{
		{"write-imm without notify", reqHeader{op: opWriteImm, length: 64, region: rw.Region, key: rw.Key, total: 64}, rdmapb.Code_ACCESS_DENIED},
		{"write-imm with a bad key", reqHeader{op: opWriteImm, length: 64, region: h.Region, key: badKey, total: 64}, rdmapb.Code_RELEASED},
		{"write-imm event before the region", reqHeader{op: opWriteImm, length: 64, region: h.Region, key: h.Key, offset: 8, total: 100}, rdmapb.Code_OUT_OF_RANGE},
		{"write-imm past the end", reqHeader{op: opWriteImm, length: 64, region: h.Region, key: h.Key, offset: 4090, total: 64}, rdmapb.Code_OUT_OF_RANGE},
		{"write-imm offset overflows", reqHeader{op: opWriteImm, length: 64, region: h.Region, key: h.Key, offset: math.MaxUint64 - 10, total: 64}, rdmapb.Code_OUT_OF_RANGE},
		{"send with nothing posted", reqHeader{op: opSend, length: 64}, rdmapb.Code_NO_RECEIVE},
		{"fetch-add without the right", reqHeader{op: opFetchAdd, length: 8, region: rw.Region, key: rw.Key, swap: 1}, rdmapb.Code_ACCESS_DENIED},
		{"fetch-add at an odd offset", reqHeader{op: opFetchAdd, length: 8, region: h.Region, key: h.Key, offset: 4, swap: 1}, rdmapb.Code_MISALIGNED},
		{"compare-swap at an odd address", reqHeader{op: opCompareSwap, length: 8, region: odd.Region, key: odd.Key, offset: 8, swap: 1}, rdmapb.Code_MISALIGNED},
		{"fetch-add past the end", reqHeader{op: opFetchAdd, length: 8, region: h.Region, key: h.Key, offset: 4096, swap: 1}, rdmapb.Code_OUT_OF_RANGE},
		{"compare-swap with a bad key", reqHeader{op: opCompareSwap, length: 8, region: h.Region, key: badKey}, rdmapb.Code_RELEASED},
	}
	for i, tc := range cases {
		tc.req.wrid = uint64(100 + i)
		writeRaw(t, c, verbFrame(tc.req, payload, trailerCommit))
		r := readResp(t, c)
		if rdmapb.Code(r.code) != tc.want || r.wrid != tc.req.wrid || r.op != tc.req.op || r.value != 0 {
			t.Fatalf("%s: response %+v, want code %v", tc.name, r, tc.want)
		}
		backendtest.AssertSame(t, tc.name+": region", mem, before)
		backendtest.AssertSame(t, tc.name+": read-write region", rwMem, rwBefore)
		backendtest.AssertSame(t, tc.name+": odd region", oddMem, oddBefore)
	}
	if ev, _, _ := in.Refused(); ev != 0 || len(in.Events()) != 0 || len(in.Messages()) != 0 {
		t.Fatalf("refused requests reached the inbox")
	}
	if got, want := p.b.Served().Rejected, uint64(len(cases)+1); got != want {
		t.Fatalf("Rejected = %d, want %d", got, want)
	}
	rawVerbsServe(t, c, in, h, mem)
	p.checkServes(t)
}

// rawVerbsServe: on the connection that refused, valid requests are
// served; a write-imm or send whose trailer aborts delivers nothing.
func rawVerbsServe(t *testing.T, c net.Conn, in *backendtest.Inbox, h buffer.Buffer, mem []byte) {
	t.Helper()
	binary.LittleEndian.PutUint64(mem[16:], 40)
	writeRaw(t, c, verbFrame(reqHeader{op: opFetchAdd, length: 8, wrid: 1, region: h.Region, key: h.Key, offset: 16, swap: 2}, nil, 0))
	if r := readResp(t, c); r.code != 0 || r.value != 40 || wordAt(mem, 16) != 42 {
		t.Fatalf("fetch-add: %+v, word %d", r, wordAt(mem, 16))
	}
	writeRaw(t, c, verbFrame(reqHeader{op: opCompareSwap, length: 8, wrid: 2, region: h.Region, key: h.Key, offset: 16, compare: 42, swap: 7}, nil, 0))
	if r := readResp(t, c); r.code != 0 || r.value != 42 || wordAt(mem, 16) != 7 {
		t.Fatalf("compare-swap: %+v, word %d", r, wordAt(mem, 16))
	}

	// Write-imm: aborted (the bytes may land, no event), then committed.
	data := backendtest.RandomData(t, 100)
	for _, tr := range []byte{trailerAbort, trailerCommit} {
		writeRaw(t, c, verbFrame(reqHeader{op: opWriteImm, length: 100, wrid: 3, region: h.Region, key: h.Key, offset: 1000, imm: 9, total: 100}, data, tr))
		r := readResp(t, c)
		if tr == trailerAbort {
			if r.code != codeAborted || len(in.Events()) != 0 {
				t.Fatalf("aborted write-imm: %+v, %d events", r, len(in.Events()))
			}
			continue
		}
		if r.code != 0 {
			t.Fatalf("write-imm: %+v", r)
		}
		if ev := <-in.Events(); ev != (backend.Event{Peer: backendtest.OwnerA, Region: h.Region, Offset: 1000, Length: 100, Imm: 9}) {
			t.Fatalf("event %+v", ev)
		}
		backendtest.AssertSame(t, "write-imm bytes", mem[1000:1100], data)
	}

	// Send: aborted (the buffer stays posted, no message), then committed.
	rb := backendtest.Slice(t, h, 2048, 512)
	if err := in.Post(rb); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []byte{trailerAbort, trailerCommit} {
		writeRaw(t, c, verbFrame(reqHeader{op: opSend, hasImm: true, imm: 5, length: 100, wrid: 4}, data, tr))
		r := readResp(t, c)
		if tr == trailerAbort {
			if r.code != codeAborted || len(in.Messages()) != 0 || in.Posted() != 1 {
				t.Fatalf("aborted send: %+v, %d messages, %d posted", r, len(in.Messages()), in.Posted())
			}
			continue
		}
		if r.code != 0 {
			t.Fatalf("send: %+v", r)
		}
		if m := <-in.Messages(); m.Buffer != backendtest.Slice(t, rb, 0, 100) || m.Imm != 5 || !m.HasImm || m.Peer != backendtest.OwnerA {
			t.Fatalf("message %+v", m)
		}
		backendtest.AssertSame(t, "message bytes", mem[2048:2148], data)
	}
}

// TestMalformedVerbFrames: a write-imm, send or atomic frame that breaks
// the format closes the connection (answering what came before it), is
// counted, and delivers nothing.
func TestMalformedVerbFrames(t *testing.T) {
	p := newPair(t, Config{}, Config{MaxFrameLen: 1 << 16, ChunkSize: 1 << 16})
	h, _ := backendtest.Alloc(t, p.regB, 4096, accessAll)
	in := backendtest.NewInbox(p.regB, 4, 4)
	p.b.SetInbox(in)
	t.Cleanup(in.Close)
	rb := backendtest.Slice(t, h, 2048, 2048)
	if err := in.Post(rb); err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte{0xEE}, 64)
	wi := reqHeader{op: opWriteImm, length: 64, wrid: 1, region: h.Region, key: h.Key, imm: 1, total: 64}
	send := reqHeader{op: opSend, length: 64, wrid: 2}
	fa := reqHeader{op: opFetchAdd, length: 8, wrid: 3, region: h.Region, key: h.Key, swap: 1}
	mut := func(r reqHeader, trailer byte, f func([]byte)) []byte {
		b := verbFrame(r, payload, trailer)
		f(b)
		return b
	}
	cases := []struct {
		name  string
		frame []byte
		// first is a valid request sent (and answered) before the frame.
		first []byte
	}{
		{"send over the frame limit", mut(send, 1, func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 1<<16+1) }), nil},
		{"send with a target", mut(send, 1, func(b []byte) { b[20] = 1 }), nil},
		{"send with an unknown flag", mut(send, 1, func(b []byte) { b[1] = 0x80 }), nil},
		{"write-imm total below its length", mut(wi, 1, func(b []byte) { binary.LittleEndian.PutUint64(b[56:], 1) }), nil},
		{"atomic of 9 bytes", mut(fa, 0, func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 9) }), nil},
		// The bytes after an atomic are the next header, not its payload.
		{"atomic with a payload", payload, verbFrame(fa, nil, 0)},
		{"write-imm with a bad trailer", verbFrame(wi, payload, 2), nil},
		{"send with a bad trailer", verbFrame(send, payload, 0xFF), nil},
	}
	rejected := uint64(0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := authed(t, p.b)
			if tc.first != nil {
				writeRaw(t, c, tc.first)
				if r := readResp(t, c); r.code != 0 {
					t.Fatalf("valid request first: %+v", r)
				}
			}
			writeRaw(t, c, tc.frame)
			if got := expectClosed(t, c); len(got) != 0 {
				t.Fatalf("server answered a malformed frame with %d bytes", len(got))
			}
			rejected++
			if got := p.b.Served().Rejected; got != rejected {
				t.Fatalf("Rejected = %d, want %d", got, rejected)
			}
			if len(in.Events()) != 0 || len(in.Messages()) != 0 || in.Posted() != 1 {
				t.Fatalf("malformed frame delivered: %d events, %d messages, %d posted", len(in.Events()), len(in.Messages()), in.Posted())
			}
			p.checkServes(t)
		})
	}
}

// wordAt reads the little-endian word at off of mem.
func wordAt(mem []byte, off int) uint64 { return binary.LittleEndian.Uint64(mem[off:]) }
