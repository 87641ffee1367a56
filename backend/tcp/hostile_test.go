package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// TestHostileRequests sends requests the owner must refuse over a real
// route: each fails with its sentinel, leaves the owner's memory untouched
// and leaves the backend (and the route) serving.
func TestHostileRequests(t *testing.T) {
	const n = 2 << 20 // two chunks at the default chunk size
	cases := []struct {
		name string
		op   backend.Op
		// target returns the remote handle to use; it may release regions.
		target func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer
		want   error
		// atPost: the initiator refuses it in Post (no frame is sent).
		atPost bool
	}{
		{"wrong key put", backend.OpWrite, func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer {
			h.Key[5] ^= 0x01
			return h
		}, rdmamgr.ErrBadKey, false},
		{"wrong key get", backend.OpRead, func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer {
			h.Key = buffer.Key{}
			return h
		}, rdmamgr.ErrBadKey, false},
		{"wrong region", backend.OpWrite, func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer {
			h.Region += 1000
			return h
		}, rdmamgr.ErrReleased, false},
		{"offset past the end", backend.OpWrite, func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer {
			h.Offset = h.Length + 1
			return h
		}, rdmamgr.ErrOutOfRange, false},
		{"range straddles the end", backend.OpWrite, func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer {
			h.Offset, h.Length = h.Length-500, 1000
			return h
		}, rdmamgr.ErrOutOfRange, false},
		{"get past the end", backend.OpRead, func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer {
			h.Offset = 1 << 40
			return h
		}, rdmamgr.ErrOutOfRange, false},
		{"offset+length overflows", backend.OpWrite, func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer {
			h.Offset = math.MaxUint64 - 10
			return h
		}, rdmamgr.ErrOutOfRange, true},
		{"offset+length wraps to 0 after the first chunk", backend.OpWrite, func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer {
			// Chunk 0 is out of range; chunk 1's offset wraps around to 0,
			// inside the region.
			h.Offset = math.MaxUint64 - (1 << 20) + 1
			return h
		}, rdmamgr.ErrOutOfRange, true},
		{"put to read-only region", backend.OpWrite, func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer {
			ro, mem := backendtest.Alloc(t, p.regB, n, buffer.AccessRead)
			backendtest.Random(t, mem)
			return ro
		}, rdmamgr.ErrAccess, false},
		{"get from write-only region", backend.OpRead, func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer {
			wo, mem := backendtest.Alloc(t, p.regB, n, buffer.AccessWrite)
			backendtest.Random(t, mem)
			return wo
		}, rdmamgr.ErrAccess, false},
		{"released region", backend.OpWrite, func(t *testing.T, p *pair, h buffer.Buffer) buffer.Buffer {
			gone, _ := backendtest.Alloc(t, p.regB, n, buffer.AccessReadWrite)
			if err := p.regB.Release(context.Background(), gone); err != nil {
				t.Fatalf("Release: %v", err)
			}
			return gone
		}, rdmamgr.ErrReleased, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, Config{}, Config{})
			h, mem := backendtest.Alloc(t, p.regB, n, buffer.AccessReadWrite)
			backendtest.Random(t, mem)
			target := tc.target(t, p, h)
			// Snapshot the owner's memory: the region h and, if the target
			// is another live region, that one too.
			type snap struct {
				name      string
				mem, want []byte
			}
			snaps := []snap{{"region of h", mem, bytes.Clone(mem)}}
			if target.Region != h.Region {
				if m, err := p.regB.Bytes(target); err == nil {
					snaps = append(snaps, snap{"target region", m, bytes.Clone(m)})
				}
			}
			_, local := backendtest.Alloc(t, p.regA, n, buffer.AccessReadWrite)
			backendtest.Random(t, local)
			localBefore := bytes.Clone(local)

			err := do(t, p.route, tc.op, local[:target.Length], target)
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v: %v, want %v", tc.op, err, tc.want)
			}
			for _, s := range snaps {
				backendtest.AssertSame(t, "owner's memory of the "+s.name, s.mem, s.want)
			}
			if tc.op == backend.OpRead {
				// Nothing came back, so nothing was written locally either.
				backendtest.AssertSame(t, "local memory of a refused get", local, localBefore)
			}
			wantErrs := uint64(1)
			if tc.atPost {
				wantErrs = 0
			}
			if st := p.route.Stats(); st.Errors != wantErrs || st.Ops != 0 {
				t.Fatalf("route stats %+v, want %d errors", st, wantErrs)
			}
			// The refusal does not break the route, and the backend serves
			// new routes.
			assertUp(t, p.route)
			backendtest.CheckRoute(t, waitTimeout, p.route, p.regA, p.regB)
			p.checkServes(t)
		})
	}
}

// TestMalformedFrames: after a valid hello, a frame that breaks the format
// closes the connection and counts as rejected; the backend serves on.
func TestMalformedFrames(t *testing.T) {
	p := newPair(t, Config{}, Config{MaxFrameLen: 1 << 20, ChunkSize: 1 << 20})
	h, mem := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, mem)
	before := bytes.Clone(mem)
	good := func() []byte {
		return reqBytes(reqHeader{op: opWrite, length: 16, wrid: 1, region: h.Region, key: h.Key})
	}
	cases := []struct {
		name  string
		frame func() []byte
	}{
		{"bad op", func() []byte { b := good(); b[0] = 9; return b }},
		{"op with response flag", func() []byte { b := good(); b[0] |= respFlag; return b }},
		{"flags set", func() []byte { b := good(); b[1] = 1; return b }},
		{"reserved bits", func() []byte { b := good(); b[1] = 0x40; return b }},
		{"zero length", func() []byte { b := good(); binary.LittleEndian.PutUint32(b[4:], 0); return b }},
		{"length > MaxFrameLen", func() []byte { b := good(); binary.LittleEndian.PutUint32(b[4:], 1<<20+1); return b }},
		{"length max uint32", func() []byte { b := good(); binary.LittleEndian.PutUint32(b[4:], math.MaxUint32); return b }},
	}
	rejected := uint64(0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := authed(t, p.b)
			// The frame and a payload: none of it may land in memory.
			writeRaw(t, c, append(tc.frame(), bytes.Repeat([]byte{0xEE}, 16)...))
			if got := expectClosed(t, c); len(got) != 0 {
				t.Fatalf("server answered a malformed frame with %d bytes", len(got))
			}
			rejected++
			if got := p.b.Served().Rejected; got != rejected {
				t.Fatalf("Rejected = %d, want %d", got, rejected)
			}
			backendtest.AssertSame(t, "owner's memory", mem, before)
			p.checkServes(t)
		})
	}

	t.Run("truncated header", func(t *testing.T) {
		c := authed(t, p.b)
		writeRaw(t, c, good()[:20])
		_ = c.(*net.TCPConn).CloseWrite()
		if got := expectClosed(t, c); len(got) != 0 {
			t.Fatalf("server answered a truncated frame with %d bytes", len(got))
		}
		backendtest.AssertSame(t, "owner's memory", mem, before)
		p.checkServes(t)
	})

	t.Run("truncated refused payload", func(t *testing.T) {
		c := authed(t, p.b)
		bad := reqHeader{op: opWrite, length: 4096, wrid: 1, region: h.Region, key: h.Key}
		bad.key[0] ^= 1
		writeRaw(t, c, append(reqBytes(bad), make([]byte, 100)...))
		_ = c.(*net.TCPConn).CloseWrite()
		expectClosed(t, c)
		rejected++ // refused for its key before the payload ran short
		if got := p.b.Served().Rejected; got != rejected {
			t.Fatalf("Rejected = %d, want %d", got, rejected)
		}
		backendtest.AssertSame(t, "owner's memory", mem, before)
		p.checkServes(t)
	})

	t.Run("valid frame on the same connection first", func(t *testing.T) {
		// A connection that served a valid request is closed by a later
		// malformed one, after the valid one was answered.
		c := authed(t, p.b)
		writeRaw(t, c, reqBytes(reqHeader{op: opRead, length: 64, wrid: 5, region: h.Region, key: h.Key}))
		r := readResp(t, c)
		if r.code != 0 || r.length != 64 || r.wrid != 5 {
			t.Fatalf("response %+v", r)
		}
		payload := make([]byte, 64)
		if _, err := io.ReadFull(c, payload); err != nil {
			t.Fatalf("read payload: %v", err)
		}
		backendtest.AssertSame(t, "read payload", payload, before[:64])
		b := good()
		b[1] = 0x10
		writeRaw(t, c, b)
		expectClosed(t, c)
		rejected++
		if got := p.b.Served().Rejected; got != rejected {
			t.Fatalf("Rejected = %d, want %d", got, rejected)
		}
		p.checkServes(t)
	})

	backendtest.CheckRoute(t, waitTimeout, p.route, p.regA, p.regB)
}

// TestRawRefusals: requests that are well formed but fail validation are
// answered with their code on the same connection, which stays usable, and
// change nothing.
func TestRawRefusals(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	h, mem := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	ro, roMem := backendtest.Alloc(t, p.regB, 4096, buffer.AccessRead)
	backendtest.Random(t, mem)
	backendtest.Random(t, roMem)
	before, roBefore := bytes.Clone(mem), bytes.Clone(roMem)
	badKey := h.Key
	badKey[15] ^= 0x80
	cases := []struct {
		name string
		req  reqHeader
		want rdmapb.Code
	}{
		// A wrong key and an unknown region answer alike: a peer cannot
		// probe which regions exist.
		{"bad key write", reqHeader{op: opWrite, length: 16, region: h.Region, key: badKey}, rdmapb.Code_RELEASED},
		{"bad key read", reqHeader{op: opRead, length: 16, region: h.Region, key: badKey}, rdmapb.Code_RELEASED},
		{"unknown region", reqHeader{op: opWrite, length: 16, region: 999, key: h.Key}, rdmapb.Code_RELEASED},
		{"offset out of range", reqHeader{op: opWrite, length: 16, region: h.Region, offset: 4090, key: h.Key}, rdmapb.Code_OUT_OF_RANGE},
		{"offset+length overflow write", reqHeader{op: opWrite, length: 16, region: h.Region, offset: math.MaxUint64 - 7, key: h.Key}, rdmapb.Code_OUT_OF_RANGE},
		{"offset+length overflow read", reqHeader{op: opRead, length: 4096, region: h.Region, offset: math.MaxUint64 - 100, key: h.Key}, rdmapb.Code_OUT_OF_RANGE},
		{"write to read-only", reqHeader{op: opWrite, length: 16, region: ro.Region, key: ro.Key}, rdmapb.Code_ACCESS_DENIED},
	}
	c := authed(t, p.b)
	for i, tc := range cases {
		tc.req.wrid = uint64(100 + i)
		frame := reqBytes(tc.req)
		if tc.req.op == opWrite {
			frame = append(frame, bytes.Repeat([]byte{0xEE}, int(tc.req.length))...)
		}
		writeRaw(t, c, frame)
		r := readResp(t, c)
		if rdmapb.Code(r.code) != tc.want || r.wrid != tc.req.wrid || r.length != 0 || r.op != tc.req.op {
			t.Fatalf("%s: response %+v, want code %v", tc.name, r, tc.want)
		}
		if !errors.Is(codeErr(r.op, r.code), backend.Sentinel(tc.want)) {
			t.Fatalf("%s: code does not map back to its sentinel", tc.name)
		}
		backendtest.AssertSame(t, tc.name+": owner's memory", mem, before)
		backendtest.AssertSame(t, tc.name+": read-only region", roMem, roBefore)
	}
	if got := p.b.Served().Rejected; got != uint64(len(cases)) {
		t.Fatalf("Rejected = %d, want %d", got, len(cases))
	}
	// The same connection still serves a valid write.
	data := backendtest.RandomData(t, 32)
	writeRaw(t, c, append(reqBytes(reqHeader{op: opWrite, length: 32, wrid: 1, region: h.Region, offset: 8, key: h.Key}), data...))
	if r := readResp(t, c); r.code != 0 || r.wrid != 1 {
		t.Fatalf("valid write after refusals: %+v", r)
	}
	backendtest.AssertSame(t, "written bytes", mem[8:40], data)
	p.checkServes(t)
}

// TestStraddleAcrossChunks: a multi-chunk put whose range runs past the end
// of the region fails with ErrOutOfRange. Chunks are validated one by one,
// so the chunks inside the region may land (a failed op leaves its target
// range undefined), but nothing outside the requested range is touched.
func TestStraddleAcrossChunks(t *testing.T) {
	const chunk = 64 << 10
	p := newPair(t, Config{ChunkSize: chunk, ConnsPerRoute: 2}, Config{})
	h, mem := backendtest.Alloc(t, p.regB, 4*chunk, buffer.AccessReadWrite)
	backendtest.Random(t, mem)
	before := bytes.Clone(mem)
	target := h
	target.Offset = chunk + 7 // [chunk+7, 5*chunk+7): the last chunk is out of range
	_, local := backendtest.Alloc(t, p.regA, 4*chunk, buffer.AccessReadWrite)
	backendtest.Random(t, local)
	if err := do(t, p.route, backend.OpWrite, local, target); !errors.Is(err, rdmamgr.ErrOutOfRange) {
		t.Fatalf("put: %v, want ErrOutOfRange", err)
	}
	backendtest.AssertSame(t, "owner's memory before the requested range", mem[:chunk+7], before[:chunk+7])
	for i := chunk + 7; i < len(mem); i++ {
		if mem[i] != before[i] && mem[i] != local[i-(chunk+7)] {
			t.Fatalf("byte %d holds neither its old value nor the put's", i)
		}
	}
	backendtest.CheckRoute(t, waitTimeout, p.route, p.regA, p.regB)
	p.checkServes(t)
}
