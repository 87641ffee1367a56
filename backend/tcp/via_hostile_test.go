package tcp

import (
	"bytes"
	"net"
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Hostile frames with a via or an origin, on a raw connection: refusals
// are answered with their code on the same connection (payloads and
// trailers drained, nothing lands), and malformed ones close it.

// TestRawViaRefusals: against a server that is not an agent, then against
// an agent, well-formed frames with a bad via, key or origin are answered
// with their code and the connection serves a valid frame after them; an
// agent answers an origin from a peer whose route is not an agent's
// NOT_SUPPORTED.
func TestRawViaRefusals(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	in := backendtest.NewInbox(p.regB, 4, 4)
	p.b.SetInbox(in)
	t.Cleanup(in.Close)
	h, mem := backendtest.Alloc(t, p.regB, 4096, accessAll)
	rb, rbMem := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	if err := in.Post(rb); err != nil {
		t.Fatal(err)
	}
	fake := newTestFakeAgent(t, p.regB, testVia)
	ph, procMem, err := fake.region(4096, accessAll)
	if err != nil {
		t.Fatal(err)
	}
	prb, prbMem := backendtest.Alloc(t, fake.proc, 4096, buffer.AccessReadWrite)
	if err := fake.inbox.Post(prb); err != nil {
		t.Fatal(err)
	}
	for _, m := range [][]byte{mem, rbMem, procMem, prbMem} {
		backendtest.Random(t, m)
	}
	snap := func() [][]byte {
		return [][]byte{bytes.Clone(mem), bytes.Clone(rbMem), bytes.Clone(procMem), bytes.Clone(prbMem)}
	}
	before := snap()
	badKey := ph.Key
	badKey[3] ^= 1
	type rawCase struct {
		name string
		req  reqHeader
		want rdmapb.Code
	}
	notAgent := []rawCase{
		{"write with a via", reqHeader{op: opWrite, via: testVia, length: 16, region: h.Region, key: h.Key}, rdmapb.Code_NOT_SUPPORTED},
		{"read with a via", reqHeader{op: opRead, via: testVia, length: 16, region: h.Region, key: h.Key}, rdmapb.Code_NOT_SUPPORTED},
		{"write-imm with a via", reqHeader{op: opWriteImm, via: 1, length: 16, region: h.Region, key: h.Key, total: 16}, rdmapb.Code_NOT_SUPPORTED},
		{"write-imm with an origin", reqHeader{op: opWriteImm, origin: 9, length: 16, region: h.Region, key: h.Key, total: 16}, rdmapb.Code_NOT_SUPPORTED},
		{"send with a via", reqHeader{op: opSend, via: 1, length: 16}, rdmapb.Code_NOT_SUPPORTED},
		{"send with an origin", reqHeader{op: opSend, origin: 9, length: 16}, rdmapb.Code_NOT_SUPPORTED},
		{"fetch-add with a via", reqHeader{op: opFetchAdd, via: 1, length: 8, region: h.Region, key: h.Key, swap: 1}, rdmapb.Code_NOT_SUPPORTED},
	}
	agent := []rawCase{
		{"write, bad key", reqHeader{op: opWrite, via: testVia, length: 16, region: ph.Region, key: badKey}, rdmapb.Code_RELEASED},
		{"write, unknown slot", reqHeader{op: opWrite, via: testVia + 1, length: 16, region: ph.Region, key: ph.Key}, rdmapb.Code_PEER_GONE},
		{"write, the agent's region through a via", reqHeader{op: opWrite, via: testVia, length: 16, region: h.Region, key: h.Key}, rdmapb.Code_RELEASED},
		{"read, out of range", reqHeader{op: opRead, via: testVia, length: 16, region: ph.Region, offset: 4090, key: ph.Key}, rdmapb.Code_OUT_OF_RANGE},
		{"write-imm, bad key", reqHeader{op: opWriteImm, via: testVia, origin: 9, length: 16, region: ph.Region, key: badKey, total: 16}, rdmapb.Code_RELEASED},
		{"write-imm, origin without via", reqHeader{op: opWriteImm, origin: 9, length: 16, region: h.Region, key: h.Key, total: 16}, rdmapb.Code_NOT_SUPPORTED},
		{"send, unknown slot", reqHeader{op: opSend, via: testVia + 1, origin: 9, length: 16}, rdmapb.Code_PEER_GONE},
		{"send, origin without via", reqHeader{op: opSend, origin: 9, length: 16}, rdmapb.Code_NOT_SUPPORTED},
		{"compare-swap, bad key", reqHeader{op: opCompareSwap, via: testVia, length: 8, region: ph.Region, key: badKey, compare: 0, swap: 1}, rdmapb.Code_RELEASED},
	}
	// A peer whose route is not a host agent's (initiatorAgentBit) names
	// no origin, even on a well-formed frame for a live process.
	notAgentPeer := []rawCase{
		{"write-imm with an origin", reqHeader{op: opWriteImm, via: testVia, origin: 9, length: 16, region: ph.Region, key: ph.Key, total: 16}, rdmapb.Code_NOT_SUPPORTED},
		{"send with an origin", reqHeader{op: opSend, via: testVia, origin: 9, length: 16}, rdmapb.Code_NOT_SUPPORTED},
	}
	run := func(what string, dial func(*testing.T, *Backend) net.Conn, cases []rawCase) {
		c := dial(t, p.b)
		for i, tc := range cases {
			tc.req.wrid = uint64(100 + i)
			writeRaw(t, c, verbFrame(tc.req, bytes.Repeat([]byte{0xEE}, int(tc.req.length)), trailerCommit))
			r := readResp(t, c)
			if rdmapb.Code(r.code) != tc.want || r.wrid != tc.req.wrid || r.length != 0 || r.op != tc.req.op {
				t.Fatalf("%s: %s: response %+v, want code %v", what, tc.name, r, tc.want)
			}
			for i, m := range snap() {
				backendtest.AssertSame(t, what+": "+tc.name+": memory", m, before[i])
			}
		}
		if len(in.Events())+len(in.Messages())+len(fake.inbox.Events())+len(fake.inbox.Messages()) != 0 {
			t.Fatalf("%s: an inbox got an event or a message", what)
		}
		// The same connection serves a valid frame (the agent's own memory).
		data := backendtest.RandomData(t, 32)
		writeRaw(t, c, append(reqBytes(reqHeader{op: opWrite, length: 32, wrid: 1, region: h.Region, offset: 8, key: h.Key}), data...))
		if r := readResp(t, c); r.code != 0 || r.wrid != 1 {
			t.Fatalf("%s: valid write after refusals: %+v", what, r)
		}
		copy(before[0][8:40], data)
		backendtest.AssertSame(t, what+": written bytes", mem[8:40], data)
	}
	run("not an agent", authed, notAgent)
	wiring.SetResolver(p.b, fake)
	run("agent", authedAgent, agent)
	run("agent, a peer that is not one", authed, notAgentPeer)
	p.checkServes(t)
}

// TestMalformedViaFrames: a via on a ping, an origin of 0, or an origin
// flag where none may be close the connection, as any malformed frame;
// nothing lands and the backend serves on.
func TestMalformedViaFrames(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	fake := newTestFakeAgent(t, p.regB, testVia)
	wiring.SetResolver(p.b, fake)
	ph, procMem, err := fake.region(4096, accessAll)
	if err != nil {
		t.Fatal(err)
	}
	backendtest.Random(t, procMem)
	before := bytes.Clone(procMem)
	wi := reqHeader{op: opWriteImm, via: testVia, origin: 5, length: 16, wrid: 1, region: ph.Region, key: ph.Key, total: 16}
	for name, frame := range map[string][]byte{
		"ping with a via": func() []byte { b := reqBytes(reqHeader{op: opPing, wrid: 1}); b[2] = 1; return b }(),
		"origin 0": func() []byte {
			b := verbFrame(wi, make([]byte, 16), trailerCommit)
			clear(b[reqOpsSize:reqMaxSize])
			return b
		}(),
		"origin flag on a write": func() []byte {
			b := reqBytes(reqHeader{op: opWrite, via: testVia, length: 16, wrid: 1, region: ph.Region, key: ph.Key})
			b[1] |= flagOrigin
			return append(b, make([]byte, 8+16)...)
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			rejected := p.b.Served().Rejected
			c := authed(t, p.b)
			writeRaw(t, c, frame)
			if got := expectClosed(t, c); len(got) != 0 {
				t.Fatalf("server answered a malformed frame with %d bytes", len(got))
			}
			if got := p.b.Served().Rejected; got != rejected+1 {
				t.Fatalf("Rejected = %d, want %d", got, rejected+1)
			}
			backendtest.AssertSame(t, "process memory", procMem, before)
			p.checkServes(t)
		})
	}
	if n := fake.resolves.Load(); n != 0 {
		t.Fatalf("%d resolves for malformed frames", n)
	}
}
