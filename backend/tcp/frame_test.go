package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

func testKey() buffer.Key {
	var k buffer.Key
	for i := range k {
		k[i] = byte(0xA0 + i)
	}
	return k
}

func testToken(seed byte) [tokenSize]byte {
	var t [tokenSize]byte
	for i := range t {
		t[i] = seed + byte(i)
	}
	return t
}

func TestReqHeaderRoundTrip(t *testing.T) {
	cases := []reqHeader{
		{op: opWrite, length: 1, wrid: 1, region: 1, offset: 0, key: testKey()},
		{op: opRead, length: 16 << 20, wrid: math.MaxUint64, region: math.MaxUint64, offset: math.MaxUint64, key: testKey()},
		{op: opWrite, length: math.MaxUint32, wrid: 0x0102030405060708, region: 42, offset: 4096},
	}
	for _, want := range cases {
		var b [reqHeaderSize]byte
		want.encode(b[:])
		var got reqHeader
		if err := got.decode(b[:], math.MaxUint32); err != nil {
			t.Fatalf("decode(%+v): %v", want, err)
		}
		if got != want {
			t.Fatalf("round trip: got %+v, want %+v", got, want)
		}
		// Trailing bytes (the next frame) are not part of the header.
		long := append(b[:], 0xFF, 0xFF)
		if err := got.decode(long, math.MaxUint32); err != nil || got != want {
			t.Fatalf("decode with trailing bytes: %+v, %v", got, err)
		}
	}
}

func validReq() []byte {
	b := make([]byte, reqHeaderSize)
	h := reqHeader{op: opWrite, length: 100, wrid: 7, region: 3, offset: 9, key: testKey()}
	h.encode(b)
	return b
}

func TestReqHeaderDecodeRejects(t *testing.T) {
	const maxLen = 1 << 20
	cases := []struct {
		name   string
		mutate func(b []byte) []byte
	}{
		{"empty", func(b []byte) []byte { return nil }},
		{"short", func(b []byte) []byte { return b[:reqHeaderSize-1] }},
		{"op zero", func(b []byte) []byte { b[0] = 0; return b }},
		{"op three", func(b []byte) []byte { b[0] = 3; return b }},
		{"op with response flag", func(b []byte) []byte { b[0] = opWrite | respFlag; return b }},
		{"flags", func(b []byte) []byte { b[1] = 1; return b }},
		{"reserved byte 2", func(b []byte) []byte { b[2] = 0x80; return b }},
		{"reserved byte 3", func(b []byte) []byte { b[3] = 1; return b }},
		{"zero length", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], 0); return b }},
		{"length over max", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], maxLen+1); return b }},
		{"length max uint32", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], math.MaxUint32); return b }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h reqHeader
			err := h.decode(tc.mutate(validReq()), maxLen)
			if !errors.Is(err, backend.ErrProtocol) {
				t.Fatalf("decode: %v, want ErrProtocol", err)
			}
		})
	}
	// The bound itself is accepted.
	b := validReq()
	binary.LittleEndian.PutUint32(b[4:], maxLen)
	var h reqHeader
	if err := h.decode(b, maxLen); err != nil || h.length != maxLen {
		t.Fatalf("length == max: %v (length %d)", err, h.length)
	}
}

func TestRespHeaderRoundTrip(t *testing.T) {
	cases := []respHeader{
		{op: opWrite, code: 0, wrid: 1},
		{op: opWrite, code: byte(backend.Code(buffer.ErrBadKey)), wrid: math.MaxUint64},
		{op: opRead, code: 0, length: 1 << 20, wrid: 99},
		{op: opRead, code: 0, length: math.MaxUint32, wrid: 5},
		{op: opRead, code: byte(backend.Code(buffer.ErrAccess)), wrid: 5},
		{op: opRead, code: 0, length: 0, wrid: 8}, // decodes; the reader rejects it in context
	}
	for _, want := range cases {
		var b [respHeaderSize]byte
		want.encode(b[:])
		if b[0]&respFlag == 0 {
			t.Fatalf("encode did not set the response flag: %#x", b[0])
		}
		var got respHeader
		if err := got.decode(b[:]); err != nil {
			t.Fatalf("decode(%+v): %v", want, err)
		}
		if got != want {
			t.Fatalf("round trip: got %+v, want %+v", got, want)
		}
	}
}

func validResp(op, code byte, length uint32) []byte {
	b := make([]byte, respHeaderSize)
	h := respHeader{op: op, code: code, length: length, wrid: 12}
	h.encode(b)
	return b
}

func TestRespHeaderDecodeRejects(t *testing.T) {
	badKey := byte(backend.Code(buffer.ErrBadKey))
	cases := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", validResp(opWrite, 0, 0)[:respHeaderSize-1]},
		{"response flag missing", func() []byte { b := validResp(opWrite, 0, 0); b[0] &^= respFlag; return b }()},
		{"bad op", func() []byte { b := validResp(opWrite, 0, 0); b[0] = respFlag | 4; return b }()},
		{"op zero", func() []byte { b := validResp(opWrite, 0, 0); b[0] = respFlag; return b }()},
		{"reserved byte 2", func() []byte { b := validResp(opRead, 0, 0); b[2] = 1; return b }()},
		{"reserved byte 3", func() []byte { b := validResp(opRead, 0, 0); b[3] = 1; return b }()},
		{"payload on write", validResp(opWrite, 0, 10)},
		{"payload on failed read", validResp(opRead, badKey, 10)},
		{"payload on failed write", validResp(opWrite, badKey, 1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var h respHeader
			if err := h.decode(tc.b); !errors.Is(err, backend.ErrProtocol) {
				t.Fatalf("decode: %v, want ErrProtocol", err)
			}
		})
	}
}

func TestHelloRoundTrip(t *testing.T) {
	for _, want := range [][tokenSize]byte{{}, testToken(1), testToken(200)} {
		var b [helloSize]byte
		wantMAC := [macSize]byte(testToken(7))
		encodeHello(b[:], want, wantMAC)
		if !bytes.Equal(b[0:4], []byte("RDMT")) {
			t.Fatalf("hello magic %q", b[0:4])
		}
		got, mac, err := decodeHello(b[:])
		if err != nil {
			t.Fatalf("decodeHello: %v", err)
		}
		if got != want || mac != wantMAC {
			t.Fatalf("token: got %x/%x, want %x/%x", got, mac, want, wantMAC)
		}
	}
}

func TestHelloDecodeRejects(t *testing.T) {
	valid := func() []byte {
		b := make([]byte, helloSize)
		encodeHello(b, testToken(3), [macSize]byte{})
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, backend.ErrProtocol},
		{"short", valid()[:helloSize-1], backend.ErrProtocol},
		{"bad magic", func() []byte { b := valid(); b[0] = 'X'; return b }(), backend.ErrProtocol},
		{"garbage", bytes.Repeat([]byte{0xFF}, helloSize), backend.ErrProtocol},
		{"reserved", func() []byte { b := valid(); b[7] = 1; return b }(), backend.ErrProtocol},
		{"old version", func() []byte { b := valid(); binary.LittleEndian.PutUint16(b[4:], Version-1); return b }(), backend.ErrVersion},
		{"new version", func() []byte { b := valid(); binary.LittleEndian.PutUint16(b[4:], Version+1); return b }(), backend.ErrVersion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := decodeHello(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("decodeHello: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestHelloAck(t *testing.T) {
	for _, code := range []byte{0, byte(backend.Code(backend.ErrUnauthenticated)), byte(backend.Code(backend.ErrVersion)), 0xFF} {
		var b [helloAckSize]byte
		encodeHelloAck(b[:], code)
		got, err := decodeHelloAck(b[:])
		if err != nil || got != code {
			t.Fatalf("hello ack %d: got %d, %v", code, got, err)
		}
	}
	var b [helloAckSize]byte
	encodeHelloAck(b[:], 0)
	if _, err := decodeHelloAck(b[:helloAckSize-1]); !errors.Is(err, backend.ErrProtocol) {
		t.Fatalf("short ack: %v, want ErrProtocol", err)
	}
	bad := b
	bad[1] = 'X'
	if _, err := decodeHelloAck(bad[:]); !errors.Is(err, backend.ErrProtocol) {
		t.Fatalf("bad magic ack: %v, want ErrProtocol", err)
	}
	bad = b
	binary.LittleEndian.PutUint16(bad[4:], Version+1)
	if _, err := decodeHelloAck(bad[:]); !errors.Is(err, backend.ErrVersion) {
		t.Fatalf("version ack: %v, want ErrVersion", err)
	}
}

func TestInitiatorInfo(t *testing.T) {
	for _, n := range []int{1, 2, 4, maxConns} {
		got, err := decodeInitiatorInfo(encodeInitiatorInfo(n))
		if err != nil || got != n {
			t.Fatalf("initiator info %d: got %d, %v", n, got, err)
		}
	}
	withVersion := func(v uint16) []byte {
		b := encodeInitiatorInfo(1)
		binary.LittleEndian.PutUint16(b, v)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, backend.ErrProtocol},
		{"short", encodeInitiatorInfo(1)[:3], backend.ErrProtocol},
		{"long", append(encodeInitiatorInfo(1), 0), backend.ErrProtocol},
		{"zero conns", encodeInitiatorInfo(0), backend.ErrProtocol},
		{"too many conns", encodeInitiatorInfo(maxConns + 1), backend.ErrProtocol},
		{"max uint16 conns", encodeInitiatorInfo(math.MaxUint16), backend.ErrProtocol},
		{"version mismatch", withVersion(Version + 1), backend.ErrVersion},
		{"version zero", withVersion(0), backend.ErrVersion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeInitiatorInfo(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("decodeInitiatorInfo: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestResponderInfo(t *testing.T) {
	cases := []struct {
		addr   string
		tokens [][tokenSize]byte
	}{
		{"127.0.0.1:1", [][tokenSize]byte{testToken(1)}},
		{"[::1]:65535", [][tokenSize]byte{testToken(1), testToken(2), testToken(3), testToken(4)}},
		{strings.Repeat("a", maxAddrSz), make([][tokenSize]byte, maxConns)},
	}
	for _, tc := range cases {
		b := encodeResponderInfo(tc.addr, tc.tokens)
		addr, tokens, err := decodeResponderInfo(b)
		if err != nil {
			t.Fatalf("decodeResponderInfo(%q, %d tokens): %v", tc.addr, len(tc.tokens), err)
		}
		if addr != tc.addr || len(tokens) != len(tc.tokens) {
			t.Fatalf("round trip: %q/%d, want %q/%d", addr, len(tokens), tc.addr, len(tc.tokens))
		}
		for i := range tokens {
			if tokens[i] != tc.tokens[i] {
				t.Fatalf("token %d differs", i)
			}
		}
	}

	good := encodeResponderInfo("127.0.0.1:9", [][tokenSize]byte{testToken(1), testToken(2)})
	setU16 := func(off int, v uint16) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint16(b[off:], v)
		return b
	}
	rejects := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, backend.ErrProtocol},
		{"short", good[:5], backend.ErrProtocol},
		{"header only", good[:6], backend.ErrProtocol},
		{"truncated token", good[:len(good)-1], backend.ErrProtocol},
		{"trailing byte", append(bytes.Clone(good), 0), backend.ErrProtocol},
		{"count says 1, holds 2", setU16(2, 1), backend.ErrProtocol},
		{"count says 3, holds 2", setU16(2, 3), backend.ErrProtocol},
		{"zero tokens", setU16(2, 0), backend.ErrProtocol},
		{"too many tokens", encodeResponderInfo("a:1", make([][tokenSize]byte, maxConns+1)), backend.ErrProtocol},
		{"addr length too long", setU16(4, 12), backend.ErrProtocol},
		{"addr length too short", setU16(4, 10), backend.ErrProtocol},
		{"empty addr", encodeResponderInfo("", [][tokenSize]byte{testToken(1)}), backend.ErrProtocol},
		{"addr over max", encodeResponderInfo(strings.Repeat("a", maxAddrSz+1), [][tokenSize]byte{testToken(1)}), backend.ErrProtocol},
		{"version mismatch", setU16(0, Version+1), backend.ErrVersion},
	}
	for _, tc := range rejects {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := decodeResponderInfo(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("decodeResponderInfo: %v, want %v", err, tc.want)
			}
		})
	}
}

// Fuzz targets: decoding never panics, and whatever decodes re-encodes to
// the same bytes and decodes to the same value.

func FuzzReqHeader(f *testing.F) {
	f.Add(validReq(), uint32(1<<20))
	f.Add(make([]byte, reqHeaderSize), uint32(16<<20))
	f.Add(bytes.Repeat([]byte{0xFF}, reqHeaderSize+3), uint32(math.MaxUint32))
	f.Add([]byte{opRead, 0, 0, 0, 1}, uint32(1))
	f.Fuzz(func(t *testing.T, b []byte, maxLen uint32) {
		var h reqHeader
		if err := h.decode(b, maxLen); err != nil {
			if !errors.Is(err, backend.ErrProtocol) {
				t.Fatalf("decode error %v is not ErrProtocol", err)
			}
			return
		}
		ping := h.op == opPing && h.length == 0
		if !ping && (h.length == 0 || h.length > maxLen || (h.op != opWrite && h.op != opRead)) {
			t.Fatalf("decode accepted %+v (max %d)", h, maxLen)
		}
		var enc [reqHeaderSize]byte
		h.encode(enc[:])
		if !bytes.Equal(enc[:], b[:reqHeaderSize]) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", enc, b[:reqHeaderSize])
		}
		var h2 reqHeader
		if err := h2.decode(enc[:], maxLen); err != nil || h2 != h {
			t.Fatalf("second decode: %+v, %v; want %+v", h2, err, h)
		}
	})
}

func FuzzRespHeader(f *testing.F) {
	f.Add(validResp(opWrite, 0, 0))
	f.Add(validResp(opRead, 0, 4096))
	f.Add(validResp(opRead, 2, 0))
	f.Add(make([]byte, respHeaderSize))
	f.Add(bytes.Repeat([]byte{0xFF}, respHeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h respHeader
		if err := h.decode(b); err != nil {
			if !errors.Is(err, backend.ErrProtocol) {
				t.Fatalf("decode error %v is not ErrProtocol", err)
			}
			return
		}
		if h.op != opWrite && h.op != opRead && !(h.op == opPing && h.code == 0 && h.length == 0) {
			t.Fatalf("decode accepted op %#x", h.op)
		}
		if h.length != 0 && (h.op != opRead || h.code != 0) {
			t.Fatalf("decode accepted payload on %+v", h)
		}
		var enc [respHeaderSize]byte
		h.encode(enc[:])
		if !bytes.Equal(enc[:], b[:respHeaderSize]) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", enc, b[:respHeaderSize])
		}
		var h2 respHeader
		if err := h2.decode(enc[:]); err != nil || h2 != h {
			t.Fatalf("second decode: %+v, %v; want %+v", h2, err, h)
		}
	})
}

func FuzzHello(f *testing.F) {
	var b [helloSize]byte
	encodeHello(b[:], testToken(9), [macSize]byte(testToken(4)))
	f.Add(b[:])
	f.Add(b[:20])
	f.Add(make([]byte, helloSize))
	bad := b
	binary.LittleEndian.PutUint16(bad[4:], 2)
	f.Add(bad[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, mac, err := decodeHello(b)
		if err != nil {
			if !errors.Is(err, backend.ErrProtocol) && !errors.Is(err, backend.ErrVersion) {
				t.Fatalf("decode error %v is neither ErrProtocol nor ErrVersion", err)
			}
			return
		}
		var enc [helloSize]byte
		encodeHello(enc[:], tok, mac)
		if !bytes.Equal(enc[:], b[:helloSize]) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", enc, b[:helloSize])
		}
		tok2, mac2, err := decodeHello(enc[:])
		if err != nil || tok2 != tok || mac2 != mac {
			t.Fatalf("second decode: %x, %v; want %x", tok2, err, tok)
		}
	})
}

func FuzzResponderInfo(f *testing.F) {
	f.Add(encodeResponderInfo("127.0.0.1:4000", [][tokenSize]byte{testToken(1)}))
	f.Add(encodeResponderInfo("h:1", [][tokenSize]byte{testToken(1), testToken(2), testToken(3)}))
	f.Add([]byte{1, 0, 1, 0, 1, 0})
	f.Add([]byte{1, 0, 0xFF, 0xFF, 0xFF, 0xFF})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		addr, tokens, err := decodeResponderInfo(b)
		if err != nil {
			if !errors.Is(err, backend.ErrProtocol) && !errors.Is(err, backend.ErrVersion) {
				t.Fatalf("decode error %v is neither ErrProtocol nor ErrVersion", err)
			}
			return
		}
		if len(tokens) < 1 || len(tokens) > maxConns || len(addr) < 1 || len(addr) > maxAddrSz {
			t.Fatalf("decode accepted addr %d bytes, %d tokens", len(addr), len(tokens))
		}
		enc := encodeResponderInfo(addr, tokens)
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", enc, b)
		}
		addr2, tokens2, err := decodeResponderInfo(enc)
		if err != nil || addr2 != addr || len(tokens2) != len(tokens) {
			t.Fatalf("second decode: %q, %d tokens, %v", addr2, len(tokens2), err)
		}
		for i := range tokens {
			if tokens2[i] != tokens[i] {
				t.Fatalf("token %d differs after round trip", i)
			}
		}
	})
}

func FuzzInitiatorInfo(f *testing.F) {
	f.Add(encodeInitiatorInfo(1))
	f.Add(encodeInitiatorInfo(maxConns))
	f.Add(encodeInitiatorInfo(0))
	f.Add([]byte{2, 0, 1, 0})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := decodeInitiatorInfo(b)
		if err != nil {
			if !errors.Is(err, backend.ErrProtocol) && !errors.Is(err, backend.ErrVersion) {
				t.Fatalf("decode error %v is neither ErrProtocol nor ErrVersion", err)
			}
			return
		}
		if n < 1 || n > maxConns {
			t.Fatalf("decode accepted %d connections", n)
		}
		enc := encodeInitiatorInfo(n)
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs: got %x, want %x", enc, b)
		}
		if n2, err := decodeInitiatorInfo(enc); err != nil || n2 != n {
			t.Fatalf("second decode: %d, %v; want %d", n2, err, n)
		}
	})
}
