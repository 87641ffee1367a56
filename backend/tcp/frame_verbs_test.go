package tcp

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// verbHeaders are valid requests of the ops beyond write and read.
func verbHeaders() []reqHeader {
	return []reqHeader{
		{op: opWriteImm, length: 100, wrid: 1, region: 3, offset: 9, key: testKey(), imm: 0xFFFFFFFF, total: 100},
		{op: opWriteImm, length: 1, wrid: 2, region: 3, offset: 1 << 20, key: testKey(), imm: 0, total: math.MaxUint64},
		{op: opSend, length: 1 << 20, wrid: 3},
		{op: opSend, hasImm: true, length: 1, wrid: 4, imm: 0x01020304},
		{op: opSend, hasImm: true, length: 7, wrid: 5},
		{op: opCompareSwap, length: 8, wrid: 6, region: 1, offset: 8, key: testKey(), compare: math.MaxUint64, swap: 1},
		{op: opFetchAdd, length: 8, wrid: 7, region: 1, offset: 3, key: testKey(), swap: math.MaxUint64},
	}
}

// checkReqHeader fails unless a decoded h is one the decoder may accept.
func checkReqHeader(t *testing.T, h *reqHeader, maxLen uint32) {
	t.Helper()
	ok := true
	switch h.op {
	case opPing:
		ok = h.length == 0 && h.region == 0 && h.offset == 0 && h.key == buffer.Key{}
	case opCompareSwap, opFetchAdd:
		ok = h.length == 8 && (h.op == opCompareSwap || h.compare == 0)
	case opWrite, opRead, opWriteImm, opSend:
		ok = h.length != 0 && h.length <= maxLen
		if h.op == opWriteImm {
			ok = ok && h.total >= uint64(h.length)
		}
		if h.op == opSend {
			ok = ok && h.region == 0 && h.offset == 0 && h.key == buffer.Key{} && (h.hasImm || h.imm == 0)
		}
	default:
		ok = false
	}
	// A via anywhere but on a ping; an origin (not 0) only on a write-imm
	// or a send.
	ok = ok && (h.via == 0 || h.op != opPing) && (h.origin == 0 || hasTrailer(h.op))
	if !ok || (h.hasImm && h.op != opSend) {
		t.Fatalf("decode accepted %+v (max %d)", *h, maxLen)
	}
}

func TestVerbHeadersRoundTrip(t *testing.T) {
	for _, want := range verbHeaders() {
		b := reqBytes(want)
		if len(b) != reqOpsSize {
			t.Fatalf("%+v encodes to %d bytes, want %d", want, len(b), reqOpsSize)
		}
		var got reqHeader
		if err := got.decode(b, 1<<20); err != nil || got != want {
			t.Fatalf("round trip of %+v: %+v, %v", want, got, err)
		}
		// The fixed part alone is not enough.
		if err := got.decode(b[:reqHeaderSize], 1<<20); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Fatalf("decode without the operands: %v, want ErrProtocol", err)
		}
	}
	for _, want := range []respHeader{{op: opFetchAdd, wrid: 1, value: math.MaxUint64}, {op: opCompareSwap, code: 23, wrid: 2}, {op: opSend, code: 21, wrid: 3}} {
		b := make([]byte, want.size())
		want.encode(b)
		var got respHeader
		if err := got.decode(b); err != nil || got != want {
			t.Fatalf("round trip of %+v: %+v, %v", want, got, err)
		}
	}
}

func TestVerbHeadersDecodeRejects(t *testing.T) {
	hs := verbHeaders()
	wi, send, sendImm, cas, fa := hs[0], hs[2], hs[3], hs[5], hs[6]
	mut := func(h reqHeader, f func(b []byte)) []byte { b := reqBytes(h); f(b); return b }
	cases := []struct {
		name string
		b    []byte
	}{
		{"write-imm with flags", mut(wi, func(b []byte) { b[1] = flagImm })},
		{"write-imm total below its length", mut(wi, func(b []byte) { binary.LittleEndian.PutUint64(b[56:], 99) })},
		{"write-imm reserved operand", mut(wi, func(b []byte) { b[53] = 1 })},
		{"write-imm of 0 bytes", mut(wi, func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 0) })},
		{"send over the frame limit", mut(send, func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 1<<20+1) })},
		{"send of 0 bytes", mut(send, func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 0) })},
		{"send with an unknown flag", mut(send, func(b []byte) { b[1] = 2 })},
		{"send with a region", mut(send, func(b []byte) { b[16] = 1 })},
		{"send with an offset", mut(send, func(b []byte) { b[31] = 1 })},
		{"send with a key", mut(send, func(b []byte) { b[47] = 1 })},
		{"send with an imm but no flag", mut(send, func(b []byte) { b[48] = 1 })},
		{"send with operands past the imm", mut(sendImm, func(b []byte) { b[60] = 1 })},
		{"compare-swap of 16 bytes", mut(cas, func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 16) })},
		{"compare-swap of 0 bytes", mut(cas, func(b []byte) { binary.LittleEndian.PutUint32(b[4:], 0) })},
		{"fetch-add with a compare", mut(fa, func(b []byte) { b[50] = 1 })},
		{"fetch-add with flags", mut(fa, func(b []byte) { b[1] = flagImm })},
		{"atomic operands cut short", reqBytes(cas)[:reqOpsSize-1]},
		{"op past the last", mut(fa, func(b []byte) { b[0] = opFetchAdd + 1 })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h reqHeader
			if err := h.decode(tc.b, 1<<20); !errors.Is(err, rdmamgr.ErrProtocol) {
				t.Fatalf("decode: %v (%+v), want ErrProtocol", err, h)
			}
		})
	}
	resp := func(h respHeader, f func(b []byte)) []byte {
		b := make([]byte, respMaxSize)
		h.encode(b)
		f(b)
		return b[:h.size()]
	}
	for name, b := range map[string][]byte{
		"value on a refused atomic": resp(respHeader{op: opFetchAdd, code: 4}, func(b []byte) { b[20] = 1 }),
		"payload on an atomic":      resp(respHeader{op: opCompareSwap}, func(b []byte) { b[4] = 8 }),
		"payload on a send":         resp(respHeader{op: opSend}, func(b []byte) { b[4] = 1 }),
		"atomic value cut short":    resp(respHeader{op: opFetchAdd}, func(b []byte) {})[:respMaxSize-1],
	} {
		var h respHeader
		if err := h.decode(b); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("%s: decode %v, want ErrProtocol", name, err)
		}
	}
}
