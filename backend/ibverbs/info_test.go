package ibverbs

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
)

func goodInfo() routeInfo {
	ri := routeInfo{mtu: 3, rdAtom: 16, flags: infoAtomics, qpn: 0x1234, psn: 0xABCDEF, lid: 0, recvSlots: 16, maxSend: 4096}
	copy(ri.gid[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1})
	return ri
}

func TestRouteInfoRoundTrip(t *testing.T) {
	ri := goodInfo()
	b := ri.encode()
	if len(b) != infoSize {
		t.Fatalf("encoded %d bytes, want %d", len(b), infoSize)
	}
	want := []byte{2, 3, 16, 1, 0, 0, 0x12, 0x34, 0, 0xAB, 0xCD, 0xEF, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1,
		0, 16, 0, 0, 0, 0, 0x10, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("layout\n got %x\nwant %x", b, want)
	}
	got, err := decodeRouteInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	ri.version = infoVersion
	if got != ri {
		t.Fatalf("decoded %+v, want %+v", got, ri)
	}
	if err := got.checkAddress(true); err != nil {
		t.Errorf("RoCE address: %v", err)
	}

	// A host agent's info: the agent bit, next to the atomics one.
	ri.flags |= infoAgent
	b = ri.encode()
	if b[3] != infoAtomics|infoAgent {
		t.Fatalf("agent info flags %#x", b[3])
	}
	if got, err = decodeRouteInfo(b); err != nil || got != ri {
		t.Fatalf("agent info decoded %+v, %v, want %+v", got, err, ri)
	}
}

func TestRouteInfoHostile(t *testing.T) {
	mod := func(f func(b []byte) []byte) []byte {
		ri := goodInfo()
		return f(ri.encode())
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"nil", nil, rdmamgr.ErrProtocol},
		{"empty", []byte{}, rdmamgr.ErrProtocol},
		{"version 0", mod(func(b []byte) []byte { b[0] = 0; return b }), rdmamgr.ErrVersion},
		{"version 1", mod(func(b []byte) []byte { b[0] = 1; return b[:32] }), rdmamgr.ErrVersion},
		{"version 4", mod(func(b []byte) []byte { b[0] = 4; return b }), rdmamgr.ErrVersion},
		{"version 4 longer", mod(func(b []byte) []byte { b[0] = 4; return append(b, 1, 2, 3) }), rdmamgr.ErrVersion},
		{"version 3 without its fallback part", mod(func(b []byte) []byte { b[0] = 3; return b }), rdmamgr.ErrProtocol},
		{"version 3 short", mod(func(b []byte) []byte { b[0] = 3; return b[:infoSize-1] }), rdmamgr.ErrProtocol},
		{"version 3 truncated length", mod(func(b []byte) []byte { b[0] = 3; return append(b, 0, 0) }), rdmamgr.ErrProtocol},
		{"version 3 kind too long", mod(func(b []byte) []byte {
			b[0] = 3
			return append(append(append(b, 17), bytes.Repeat([]byte("a"), 17)...), 0, 0)
		}), rdmamgr.ErrProtocol},
		{"version 3 kind not a name", mod(func(b []byte) []byte { b[0] = 3; return append(b, 3, 't', 0, 'p', 0, 0) }), rdmamgr.ErrProtocol},
		{"version 3 kind truncated", mod(func(b []byte) []byte { b[0] = 3; return append(b, 3, 't', 'c') }), rdmamgr.ErrProtocol},
		{"version 3 info too long", mod(func(b []byte) []byte {
			b[0] = 3
			return append(append(append(b, 3, 't', 'c', 'p'), 0x10, 0x01), make([]byte, 0x1001)...)
		}), rdmamgr.ErrProtocol},
		{"version 3 info truncated", mod(func(b []byte) []byte { b[0] = 3; return append(b, 3, 't', 'c', 'p', 0, 4, 1, 2, 3) }), rdmamgr.ErrProtocol},
		{"version 3 trailing byte", mod(func(b []byte) []byte { b[0] = 3; return append(b, 3, 't', 'c', 'p', 0, 1, 1, 9) }), rdmamgr.ErrProtocol},
		{"version 3 info without kind", mod(func(b []byte) []byte { b[0] = 3; return append(b, 0, 0, 1, 7) }), rdmamgr.ErrProtocol},
		{"version 3 base still checked", mod(func(b []byte) []byte { b[0], b[1] = 3, 0; return append(b, 0, 0, 0) }), rdmamgr.ErrProtocol},
		{"short", mod(func(b []byte) []byte { return b[:infoSize-1] }), rdmamgr.ErrProtocol},
		{"long", mod(func(b []byte) []byte { return append(b, 0) }), rdmamgr.ErrProtocol},
		{"version only", []byte{infoVersion}, rdmamgr.ErrProtocol},
		{"mtu 0", mod(func(b []byte) []byte { b[1] = 0; return b }), rdmamgr.ErrProtocol},
		{"mtu 6", mod(func(b []byte) []byte { b[1] = 6; return b }), rdmamgr.ErrProtocol},
		{"mtu 255", mod(func(b []byte) []byte { b[1] = 255; return b }), rdmamgr.ErrProtocol},
		{"no responder resources", mod(func(b []byte) []byte { b[2] = 0; return b }), rdmamgr.ErrProtocol},
		{"unknown flag", mod(func(b []byte) []byte { b[3] = 4; return b }), rdmamgr.ErrProtocol},
		{"unknown flag 7", mod(func(b []byte) []byte { b[3] = 0x80 | infoAgent; return b }), rdmamgr.ErrProtocol},
		{"qpn 0", mod(func(b []byte) []byte { copy(b[4:], []byte{0, 0, 0, 0}); return b }), rdmamgr.ErrProtocol},
		{"qpn 1 (GSI)", mod(func(b []byte) []byte { copy(b[4:], []byte{0, 0, 0, 1}); return b }), rdmamgr.ErrProtocol},
		{"qpn 25 bits", mod(func(b []byte) []byte { copy(b[4:], []byte{1, 0, 0, 2}); return b }), rdmamgr.ErrProtocol},
		{"psn 25 bits", mod(func(b []byte) []byte { copy(b[8:], []byte{1, 0, 0, 0}); return b }), rdmamgr.ErrProtocol},
		{"psn all ones", mod(func(b []byte) []byte { copy(b[8:], []byte{0xff, 0xff, 0xff, 0xff}); return b }), rdmamgr.ErrProtocol},
		{"reserved", mod(func(b []byte) []byte { b[15] = 1; return b }), rdmamgr.ErrProtocol},
		{"reserved after slots", mod(func(b []byte) []byte { b[35] = 1; return b }), rdmamgr.ErrProtocol},
		{"no receive slots", mod(func(b []byte) []byte { b[32], b[33] = 0, 0; return b }), rdmamgr.ErrProtocol},
		{"too many receive slots", mod(func(b []byte) []byte { b[32], b[33] = 0x10, 1; return b }), rdmamgr.ErrProtocol},
		{"huge messages", mod(func(b []byte) []byte { b[36], b[37] = 0, 0x10; b[39] = 1; return b }), rdmamgr.ErrProtocol},
	} {
		_, err := decodeRouteInfo(tc.b)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestRouteInfoFallback: version 3 carries the fallback's kind and info
// after version 2's bytes (an empty kind: no fallback), and decodes back;
// an info without a fallback is version 2, byte for byte as before.
func TestRouteInfoFallback(t *testing.T) {
	ri := goodInfo()
	v2 := ri.encode()
	ri.fb = &fallbackInfo{kind: "tcp", info: []byte{9, 8, 7}}
	b := ri.encode()
	want := append(bytes.Clone(v2), 3, 't', 'c', 'p', 0, 3, 9, 8, 7)
	want[0] = 3
	if !bytes.Equal(b, want) {
		t.Fatalf("layout\n got %x\nwant %x", b, want)
	}
	got, err := decodeRouteInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.version != infoVersionFB || got.fb == nil || got.fb.kind != "tcp" || !bytes.Equal(got.fb.info, []byte{9, 8, 7}) {
		t.Fatalf("decoded version %d fallback %+v", got.version, got.fb)
	}
	b[len(b)-1] = 0 // the decoded info is a copy
	if got.fb.info[2] != 7 {
		t.Fatal("decoded fallback info aliases the message")
	}
	got.fb, ri.fb = nil, nil
	ri.version = infoVersionFB
	if got != ri {
		t.Fatalf("decoded %+v, want %+v", got, ri)
	}

	// No fallback at the sender, but version 3: an empty kind.
	ri.fb = &fallbackInfo{}
	b = ri.encode()
	if len(b) != infoSize+3 || b[0] != 3 {
		t.Fatalf("version 3 without a fallback: %x", b)
	}
	if got, err = decodeRouteInfo(b); err != nil || got.fb == nil || got.fb.kind != "" || len(got.fb.info) != 0 {
		t.Fatalf("version 3 without a fallback decoded %+v, %v", got.fb, err)
	}

	// Version 2 decodes without a fallback.
	if got, err = decodeRouteInfo(v2); err != nil || got.fb != nil || got.version != infoVersion {
		t.Fatalf("version 2 decoded version %d fallback %+v, %v", got.version, got.fb, err)
	}
}

func TestRouteInfoAddress(t *testing.T) {
	ri := goodInfo()
	ri.gid = [16]byte{}
	if err := ri.checkAddress(true); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Errorf("RoCE without GID: %v", err)
	}
	ri.gid[0] = 0xff
	if err := ri.checkAddress(true); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Errorf("RoCE with a multicast GID: %v", err)
	}
	for _, lid := range []uint16{0, 0xC000, 0xFFFF} {
		ri.lid = lid
		if err := ri.checkAddress(false); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("InfiniBand LID %#x: %v", lid, err)
		}
	}
	ri.lid = 7
	if err := ri.checkAddress(false); err != nil {
		t.Errorf("InfiniBand LID 7: %v", err)
	}
}

func FuzzDecodeRouteInfo(f *testing.F) {
	ri := goodInfo()
	f.Add(ri.encode())
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{infoVersion})
	ri.flags |= infoAgent
	f.Add(ri.encode())
	ri.fb = &fallbackInfo{kind: "tcp", info: []byte("127.0.0.1:1")}
	f.Add(ri.encode())
	ri.fb = &fallbackInfo{}
	f.Add(ri.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeRouteInfo(b)
		if err != nil {
			if !errors.Is(err, rdmamgr.ErrProtocol) && !errors.Is(err, rdmamgr.ErrVersion) {
				t.Fatalf("error %v wraps neither ErrProtocol nor ErrVersion", err)
			}
			return
		}
		// Whatever decodes is in range and encodes back to the same bytes.
		if got.mtu < 1 || got.mtu > 5 || got.qpn < 2 || got.qpn > 0xFFFFFF || got.psn > 0xFFFFFF || got.rdAtom == 0 ||
			got.recvSlots == 0 || got.recvSlots > maxRecvSlots || got.maxSend > maxSendLimit {
			t.Fatalf("accepted out-of-range info %+v", got)
		}
		if !bytes.Equal(got.encode(), b) {
			t.Fatalf("re-encoding %x gives %x", b, got.encode())
		}
	})
}

func TestMTUBytes(t *testing.T) {
	for m, want := range map[int]int{0: 0, 1: 256, 3: 1024, 5: 4096, 6: 0} {
		if got := mtuBytes(m); got != want {
			t.Errorf("mtuBytes(%d) = %d, want %d", m, got, want)
		}
	}
}
