package ibverbs

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
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
		"flags on notice":  mod(func(p []byte) []byte { p[1] = 1; return p }),
		"reserved":         mod(func(p []byte) []byte { p[3] = 1; return p }),
		"reserved 2":       mod(func(p []byte) []byte { p[12] = 1; return p }),
		"short notice":     mod(func(p []byte) []byte { return p[:ctlNoticeSize-1] }),
		"long notice":      mod(func(p []byte) []byte { return append(p, 0) }),
		"empty range":      mod(func(p []byte) []byte { clear(p[32:40]); return p }),
		"range overflows":  mod(func(p []byte) []byte { copy(p[24:32], bytes.Repeat([]byte{0xff}, 8)); return p }),
		"long ack":         mod(func(p []byte) []byte { p[0] = ctlAck; clear(p[8:12]); return p }),
		"ack unknown code": mod(func(p []byte) []byte { p[0] = ctlAck; p[8] = 0x7f; return p[:ctlHeader] }),
		"send flag 2":      mod(func(p []byte) []byte { p[0], p[1] = ctlSend, 2; return p }),
	} {
		if _, err := decodeCtl(p); !errors.Is(err, rdmamgr.ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}

func FuzzDecodeCtl(f *testing.F) {
	f.Add(goodNotice())
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
		q := make([]byte, len(p))
		copy(q, p) // a Send's payload
		if m.kind == ctlNotice {
			m.putNotice(q)
		} else {
			m.putHeader(q)
		}
		if !bytes.Equal(p, q) {
			t.Fatalf("re-encoding %x gives %x", p, q)
		}
	})
}
