package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// The wire forms of route setup (handshake.go): hello, hello ack, route
// info. Fuzz targets: decoding never panics, and whatever decodes
// re-encodes to the same bytes and decodes to the same value.

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
		{"empty", nil, rdmamgr.ErrProtocol},
		{"short", valid()[:helloSize-1], rdmamgr.ErrProtocol},
		{"bad magic", func() []byte { b := valid(); b[0] = 'X'; return b }(), rdmamgr.ErrProtocol},
		{"garbage", bytes.Repeat([]byte{0xFF}, helloSize), rdmamgr.ErrProtocol},
		{"reserved", func() []byte { b := valid(); b[7] = 1; return b }(), rdmamgr.ErrProtocol},
		{"old version", func() []byte { b := valid(); binary.LittleEndian.PutUint16(b[4:], Version-1); return b }(), rdmamgr.ErrVersion},
		{"new version", func() []byte { b := valid(); binary.LittleEndian.PutUint16(b[4:], Version+1); return b }(), rdmamgr.ErrVersion},
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
	for _, code := range []byte{0, byte(backend.Code(rdmamgr.ErrUnauthenticated)), byte(backend.Code(rdmamgr.ErrVersion)), 0xFF} {
		var b [helloAckSize]byte
		encodeHelloAck(b[:], code)
		got, err := decodeHelloAck(b[:])
		if err != nil || got != code {
			t.Fatalf("hello ack %d: got %d, %v", code, got, err)
		}
	}
	var b [helloAckSize]byte
	encodeHelloAck(b[:], 0)
	if _, err := decodeHelloAck(b[:helloAckSize-1]); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("short ack: %v, want ErrProtocol", err)
	}
	bad := b
	bad[1] = 'X'
	if _, err := decodeHelloAck(bad[:]); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("bad magic ack: %v, want ErrProtocol", err)
	}
	bad = b
	binary.LittleEndian.PutUint16(bad[4:], Version+1)
	if _, err := decodeHelloAck(bad[:]); !errors.Is(err, rdmamgr.ErrVersion) {
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
		{"empty", nil, rdmamgr.ErrProtocol},
		{"short", encodeInitiatorInfo(1)[:3], rdmamgr.ErrProtocol},
		{"long", append(encodeInitiatorInfo(1), 0), rdmamgr.ErrProtocol},
		{"zero conns", encodeInitiatorInfo(0), rdmamgr.ErrProtocol},
		{"too many conns", encodeInitiatorInfo(maxConns + 1), rdmamgr.ErrProtocol},
		{"max uint16 conns", encodeInitiatorInfo(math.MaxUint16), rdmamgr.ErrProtocol},
		{"version mismatch", withVersion(Version + 1), rdmamgr.ErrVersion},
		{"version zero", withVersion(0), rdmamgr.ErrVersion},
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
		{"empty", nil, rdmamgr.ErrProtocol},
		{"short", good[:5], rdmamgr.ErrProtocol},
		{"header only", good[:6], rdmamgr.ErrProtocol},
		{"truncated token", good[:len(good)-1], rdmamgr.ErrProtocol},
		{"trailing byte", append(bytes.Clone(good), 0), rdmamgr.ErrProtocol},
		{"count says 1, holds 2", setU16(2, 1), rdmamgr.ErrProtocol},
		{"count says 3, holds 2", setU16(2, 3), rdmamgr.ErrProtocol},
		{"zero tokens", setU16(2, 0), rdmamgr.ErrProtocol},
		{"too many tokens", encodeResponderInfo("a:1", make([][tokenSize]byte, maxConns+1)), rdmamgr.ErrProtocol},
		{"addr length too long", setU16(4, 12), rdmamgr.ErrProtocol},
		{"addr length too short", setU16(4, 10), rdmamgr.ErrProtocol},
		{"empty addr", encodeResponderInfo("", [][tokenSize]byte{testToken(1)}), rdmamgr.ErrProtocol},
		{"addr over max", encodeResponderInfo(strings.Repeat("a", maxAddrSz+1), [][tokenSize]byte{testToken(1)}), rdmamgr.ErrProtocol},
		{"version mismatch", setU16(0, Version+1), rdmamgr.ErrVersion},
	}
	for _, tc := range rejects {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := decodeResponderInfo(tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("decodeResponderInfo: %v, want %v", err, tc.want)
			}
		})
	}
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
			if !errors.Is(err, rdmamgr.ErrProtocol) && !errors.Is(err, rdmamgr.ErrVersion) {
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
	f.Add(withResponderAgent(encodeResponderInfo("h:1", [][tokenSize]byte{testToken(1), testToken(2)})))
	f.Add([]byte{1, 0, 1, 0, 1, 0})
	f.Add([]byte{1, 0, 0xFF, 0xFF, 0xFF, 0xFF})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		addr, tokens, err := decodeResponderInfo(b)
		if err != nil {
			if !errors.Is(err, rdmamgr.ErrProtocol) && !errors.Is(err, rdmamgr.ErrVersion) {
				t.Fatalf("decode error %v is neither ErrProtocol nor ErrVersion", err)
			}
			return
		}
		if len(tokens) < 1 || len(tokens) > maxConns || len(addr) < 1 || len(addr) > maxAddrSz {
			t.Fatalf("decode accepted addr %d bytes, %d tokens", len(addr), len(tokens))
		}
		enc := encodeResponderInfo(addr, tokens)
		if responderAgent(b) {
			enc = withResponderAgent(enc)
		}
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
	f.Add(withTLS(encodeInitiatorInfo(2)))
	f.Add(withAgent(encodeInitiatorInfo(2)))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := decodeInitiatorInfo(b)
		if err != nil {
			if !errors.Is(err, rdmamgr.ErrProtocol) && !errors.Is(err, rdmamgr.ErrVersion) {
				t.Fatalf("decode error %v is neither ErrProtocol nor ErrVersion", err)
			}
			return
		}
		if n < 1 || n > maxConns {
			t.Fatalf("decode accepted %d connections", n)
		}
		enc := encodeInitiatorInfo(n)
		if initiatorTLS(b) {
			enc = withTLS(enc)
		}
		if initiatorAgent(b) {
			enc = withAgent(enc)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs: got %x, want %x", enc, b)
		}
		if n2, err := decodeInitiatorInfo(enc); err != nil || n2 != n {
			t.Fatalf("second decode: %d, %v; want %d", n2, err, n)
		}
	})
}
