package tcp

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/rdmamgr/rdmamgr"
)

// The via (request bytes 2:4) and the origin (flagOrigin, 8 bytes after
// the operands of a write-imm or a send) on the wire.

// viaHeaders are valid requests with a via or an origin.
func viaHeaders() []reqHeader {
	var hs []reqHeader
	for i, h := range verbHeaders() {
		h.via = uint16(1 + i)
		if hasTrailer(h.op) {
			h.origin = uint64(0xABCDEF00 + i)
		}
		hs = append(hs, h)
	}
	return append(hs,
		reqHeader{op: opWrite, first: true, via: math.MaxUint16, length: 100, wrid: 1, region: 3, offset: 9, key: testKey()},
		reqHeader{op: opRead, via: 1, length: 8, wrid: 2, region: 3, key: testKey()},
		reqHeader{op: opSend, origin: math.MaxUint64, length: 1, wrid: 3},             // origin without via: decodes (the server refuses it)
		reqHeader{op: opWriteImm, origin: 1, length: 1, wrid: 4, region: 1, total: 1}, // likewise
	)
}

func TestViaHeadersRoundTrip(t *testing.T) {
	for _, want := range viaHeaders() {
		b := reqBytes(want)
		wantSize := reqSize(want.op)
		if want.origin != 0 {
			wantSize = reqMaxSize
		}
		if len(b) != wantSize || reqSizeOf(b[0], b[1]) != wantSize {
			t.Fatalf("%+v encodes to %d bytes (size of its first bytes %d), want %d", want, len(b), reqSizeOf(b[0], b[1]), wantSize)
		}
		if binary.LittleEndian.Uint16(b[2:]) != want.via || (want.origin != 0) != (b[1]&flagOrigin != 0) {
			t.Fatalf("%+v: via or origin flag not on the wire: %x", want, b[:4])
		}
		var got reqHeader
		if err := got.decode(b, 1<<20); err != nil || got != want {
			t.Fatalf("round trip of %+v: %+v, %v", want, got, err)
		}
		if want.origin != 0 {
			// The origin is part of the header: without it the header is short.
			if err := got.decode(b[:reqOpsSize], 1<<20); !errors.Is(err, rdmamgr.ErrProtocol) {
				t.Fatalf("decode without the origin: %v, want ErrProtocol", err)
			}
		}
	}
	// The via travels on every frame the client writes; the origin only on
	// the ops that notify.
	h := reqHeader{op: opFetchAdd, via: 3, origin: 99, length: 8, swap: 1}
	if b := reqBytes(h); len(b) != reqOpsSize || b[1] != 0 {
		t.Fatalf("fetch-add with an origin encodes %d bytes, flags %#x", len(b), b[1])
	}
}

func TestViaHeadersDecodeRejects(t *testing.T) {
	mut := func(h reqHeader, f func(b []byte)) []byte { b := reqBytes(h); f(b); return b }
	wi := reqHeader{op: opWriteImm, via: 1, origin: 5, length: 8, wrid: 1, region: 1, total: 8}
	send := reqHeader{op: opSend, via: 1, origin: 5, length: 8, wrid: 2}
	cas := reqHeader{op: opCompareSwap, via: 1, length: 8, wrid: 3, region: 1}
	read := reqHeader{op: opRead, via: 1, length: 8, wrid: 4, region: 1}
	pad := func(b []byte) []byte { return append(b, make([]byte, reqOriginSize)...) }
	for name, b := range map[string][]byte{
		"ping with a via":               mut(reqHeader{op: opPing, wrid: 1}, func(b []byte) { b[2] = 1 }),
		"ping with the origin flag":     pad(mut(reqHeader{op: opPing, wrid: 1}, func(b []byte) { b[1] = flagOrigin })),
		"write-imm with origin 0":       mut(wi, func(b []byte) { clear(b[reqOpsSize:]) }),
		"send with origin 0":            mut(send, func(b []byte) { clear(b[reqOpsSize:]) }),
		"write-imm origin cut short":    reqBytes(wi)[:reqMaxSize-1],
		"read with the origin flag":     pad(mut(read, func(b []byte) { b[1] = flagOrigin })),
		"atomic with the origin flag":   pad(mut(cas, func(b []byte) { b[1] = flagOrigin })),
		"send with origin and bad flag": mut(send, func(b []byte) { b[1] |= 0x40 }),
	} {
		var h reqHeader
		if err := h.decode(b, 1<<20); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("%s: decode %v (%+v), want ErrProtocol", name, err, h)
		}
	}
}
