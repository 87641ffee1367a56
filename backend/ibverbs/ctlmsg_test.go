package ibverbs

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

func goodNotice() []byte {
	m := ctlMsg{kind: ctlNotice, seq: 7, imm: 0xDEADBEEF, region: 3, offset: 4096, length: 100}
	m.key[0], m.key[15] = 1, 2
	p := make([]byte, ctlNoticeSize)
	m.putNotice(p)
	return p
}

func TestCtlRoundTrip(t *testing.T) {
	p := goodNotice()
	want := []byte{1, 0, 0, 0, 0, 0, 0, 7, 0xDE, 0xAD, 0xBE, 0xEF, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 100,
		1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}
	if !bytes.Equal(p, want) {
		t.Fatalf("notice layout\n got %x\nwant %x", p, want)
	}
	m, err := decodeCtl(p)
	if err != nil || m.kind != ctlNotice || m.seq != 7 || m.imm != 0xDEADBEEF || m.region != 3 || m.offset != 4096 || m.length != 100 || m.key[15] != 2 {
		t.Fatalf("decoded %+v, %v", m, err)
	}
	send := make([]byte, ctlHeader+5)
	(&ctlMsg{kind: ctlSend, hasImm: true, seq: 1, imm: 9}).putHeader(send)
	if m, err := decodeCtl(send); err != nil || m.kind != ctlSend || !m.hasImm || m.imm != 9 {
		t.Fatalf("send decoded %+v, %v", m, err)
	}
	ack := make([]byte, ctlHeader)
	(&ctlMsg{kind: ctlAck, seq: 2, imm: uint32(rdmapb.Code_NO_RECEIVE)}).putHeader(ack)
	m, err = decodeCtl(ack)
	if err != nil || m.kind != ctlAck || m.seq != 2 {
		t.Fatalf("ack decoded %+v, %v", m, err)
	}
	if err := ackErr(backend.OpSend, m.imm); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("ack error %v, want ErrNoReceive", err)
	}
	if err := ackErr(backend.OpSend, 0); err != nil {
		t.Fatalf("ack OK: %v", err)
	}
}

func TestCtlHostile(t *testing.T) {
	mod := func(f func(p []byte) []byte) []byte { return f(goodNotice()) }
	for name, p := range map[string][]byte{
		"empty":            nil,
		"short header":     make([]byte, ctlHeader-1),
		"kind 0":           mod(func(p []byte) []byte { p[0] = 0; return p }),
		"kind 4":           mod(func(p []byte) []byte { p[0] = 4; return p }),
		"kind 9":           mod(func(p []byte) []byte { p[0] = 9; return p[:ctlHeader] }),
		"flags on notice":  mod(func(p []byte) []byte { p[1] = 1; return p }),
		"reserved":         mod(func(p []byte) []byte { p[3] = 1; return p }),
		"reserved 2":       mod(func(p []byte) []byte { p[12] = 1; return p }),
		"short notice":     mod(func(p []byte) []byte { return p[:ctlNoticeSize-1] }),
		"long notice":      mod(func(p []byte) []byte { return append(p, 0) }),
		"empty range":      mod(func(p []byte) []byte { clear(p[32:40]); return p }),
		"range overflows":  mod(func(p []byte) []byte { copy(p[24:32], bytes.Repeat([]byte{0xff}, 8)); return p }),
		"long ack":         mod(func(p []byte) []byte { p[0] = ctlAck; clear(p[8:12]); return p }),
		"ack unknown code": mod(func(p []byte) []byte { p[0] = ctlAck; p[8] = 0x7f; return p[:ctlHeader] }),
		"send flag 4":      mod(func(p []byte) []byte { p[0], p[1] = ctlSend, 4; return p }),
		"ack flag via":     mod(func(p []byte) []byte { p[0], p[1] = ctlAck, ctlVia; return p[:ctlHeader] }),
		"notice via short": mod(func(p []byte) []byte { p[1] = ctlVia; return p }),
	} {
		if _, err := decodeCtl(p); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}

func FuzzDecodeCtl(f *testing.F) {
	f.Add(goodNotice())
	for _, m := range viaMsgs() {
		p := make([]byte, ctlResolvedSize+3)
		n := m.put(p)
		if m.kind == ctlSend {
			n += 3
		}
		f.Add(p[:n])
	}
	f.Add([]byte{ctlAck, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{ctlSend, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0, 0, 'h', 'i'})
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := decodeCtl(p)
		if err != nil {
			if !errors.Is(err, rdmamgr.ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		// What decodes encodes back to the same bytes.
		q := make([]byte, max(len(p), ctlResolvedSize))
		copy(q, p) // a Send's payload
		n := m.put(q)
		if m.kind != ctlSend && n != len(p) || m.kind == ctlSend && n != m.hdrLen {
			t.Fatalf("%x re-encodes to %d bytes", p, n)
		}
		if !bytes.Equal(p, q[:len(p)]) {
			t.Fatalf("re-encoding %x gives %x", p, q[:len(p)])
		}
	})
}

// viaMsgs are one control message of each kind a host agent's route adds.
func viaMsgs() []ctlMsg {
	key := buffer.Key{1, 15: 2}
	return []ctlMsg{
		{kind: ctlNotice, via: true, seq: 1, imm: 5, region: 9, offset: 8, length: 16, key: key, origin: 0x1234},
		{kind: ctlSend, via: true, hasImm: true, seq: 2, imm: 6, slot: 7, origin: 0x5678},
		{kind: ctlSend, via: true, seq: 2, slot: 0xffff},
		{kind: ctlResolve, seq: 3, region: 11, key: key, slot: 7, access: buffer.AccessRead | buffer.AccessWrite},
		{kind: ctlResolved, seq: 3, addr: 0x7f0000001000, rkey: 0xabcd, access: buffer.AccessReadWrite, length: 4096, region: 12, key: key},
		{kind: ctlResolved, seq: 4, imm: uint32(rdmapb.Code_REVOKED)},
		{kind: ctlInvalidate, seq: 5, imm: uint32(rdmapb.Code_REVOKED), region: 12},
		{kind: ctlInvalAck, seq: 5, region: 12},
		{kind: ctlGoodbye},
		{kind: ctlInvalidate, seq: 0xffffffff, imm: uint32(rdmapb.Code_RELEASED), region: 1 << 63},
	}
}

// TestCtlViaRoundTrip: the messages of host agents' routes decode to
// what was encoded; the hostile variants are refused.
func TestCtlViaRoundTrip(t *testing.T) {
	for _, m := range viaMsgs() {
		p := make([]byte, 128)
		n := m.put(p)
		msg := p[:n]
		if m.kind == ctlSend {
			msg = append(msg, 'h', 'i')
		}
		got, err := decodeCtl(msg)
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		want := m
		want.hdrLen = ctlHeader
		if m.kind == ctlSend {
			want.hdrLen = ctlSendViaHeader
		}
		if got != want {
			t.Fatalf("decoded %+v\nwant    %+v", got, want)
		}
	}
	enc := func(i int, f func(p []byte) []byte) []byte {
		m := viaMsgs()[i]
		p := make([]byte, 128)
		return f(p[:m.put(p)])
	}
	for name, p := range map[string][]byte{
		"notice via without origin": enc(0, func(p []byte) []byte { return p[:ctlNoticeSize] }),
		"send via 0":                enc(1, func(p []byte) []byte { p[16], p[17] = 0, 0; return p }),
		"send via reserved":         enc(1, func(p []byte) []byte { p[20] = 1; return p }),
		"send via short":            enc(1, func(p []byte) []byte { return p[:ctlSendViaHeader-1] }),
		"resolve via 0":             enc(3, func(p []byte) []byte { p[40], p[41] = 0, 0; return p }),
		"resolve no access":         enc(3, func(p []byte) []byte { clear(p[44:48]); return p }),
		"resolve bad access":        enc(3, func(p []byte) []byte { p[44] = 0x80; return p }),
		"resolve reserved":          enc(3, func(p []byte) []byte { p[43] = 1; return p }),
		"resolve imm":               enc(3, func(p []byte) []byte { p[11] = 1; return p }),
		"resolve flags":             enc(3, func(p []byte) []byte { p[1] = ctlVia; return p }),
		"resolve long":              enc(3, func(p []byte) []byte { return append(p, 0) }),
		"answer short":              enc(4, func(p []byte) []byte { return p[:ctlResolvedSize-1] }),
		"answer empty":              enc(4, func(p []byte) []byte { clear(p[32:40]); return p }),
		"answer wraps":              enc(4, func(p []byte) []byte { copy(p[16:24], bytes.Repeat([]byte{0xff}, 8)); return p }),
		"answer region 0":           enc(4, func(p []byte) []byte { clear(p[40:48]); return p }),
		"answer bad access":         enc(4, func(p []byte) []byte { p[28] = 0x80; return p }),
		"answer unknown code":       enc(5, func(p []byte) []byte { p[10] = 0x7f; return p }),
		"refusal with a body":       enc(5, func(p []byte) []byte { return append(p, make([]byte, 48)...) }),
		"invalidate region 0":       enc(6, func(p []byte) []byte { clear(p[16:24]); return p }),
		"invalidate code OK":        enc(6, func(p []byte) []byte { clear(p[8:12]); return p }),
		"invalidate code BAD_KEY":   enc(6, func(p []byte) []byte { p[11] = byte(rdmapb.Code_BAD_KEY); return p }),
		"invalidate short":          enc(6, func(p []byte) []byte { return p[:ctlInvalSize-1] }),
		"invalidate long":           enc(6, func(p []byte) []byte { return append(p, 0) }),
		"invalidate flags":          enc(6, func(p []byte) []byte { p[1] = ctlVia; return p }),
		"invalidate ack code":       enc(7, func(p []byte) []byte { p[11] = 1; return p }),
		"invalidate ack region 0":   enc(7, func(p []byte) []byte { clear(p[16:24]); return p }),
		"invalidate ack reserved":   enc(7, func(p []byte) []byte { p[13] = 1; return p }),
		"goodbye with a body":       enc(8, func(p []byte) []byte { return append(p, 0) }),
		"goodbye code":              enc(8, func(p []byte) []byte { p[11] = 1; return p }),
		"goodbye flags":             enc(8, func(p []byte) []byte { p[1] = ctlHasImm; return p }),
	} {
		if _, err := decodeCtl(p); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}
