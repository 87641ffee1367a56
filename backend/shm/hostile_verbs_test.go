//go:build linux

package shm_test

import (
	"encoding/binary"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// TestHostileEvents: an authenticated peer's events are checked against
// what it mapped (region, slot, access, range) before the owner's inbox
// sees one; forged ones are refused and nothing is delivered.
func TestHostileEvents(t *testing.T) {
	p := newPair(t, shm.Config{})
	in := &testInbox{events: make(chan backend.Event, 8), got: make(chan []byte, 1)}
	p.b.SetInbox(in)
	notify, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite|buffer.AccessNotify)
	plain, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite)
	r := authed(t, p.b)
	slots := map[uint64]uint32{}
	for _, h := range []buffer.Buffer{notify, plain} { // map both through this connection
		r.write(t, shm.EncodeMap(1, h.Region, h.Key, byte(buffer.AccessWrite)))
		m, fds, err := r.read()
		if err != nil || m[0] != shm.MsgMapped || m[9] != 0 || len(fds) != 1 {
			t.Fatalf("map: %x %v", m, err)
		}
		slots[h.Region] = binary.LittleEndian.Uint32(m[13:])
	}
	for _, tc := range []struct {
		name           string
		slot           uint32
		region, off, n uint64
		code           rdmapb.Code
	}{
		{"region never mapped", 1, notify.Region + 100, 0, 8, rdmapb.Code_RELEASED},
		{"another region's slot", slots[plain.Region], notify.Region, 0, 8, rdmapb.Code_RELEASED},
		{"no notify right", slots[plain.Region], plain.Region, 0, 8, rdmapb.Code_ACCESS_DENIED},
		{"past the end", slots[notify.Region], notify.Region, 4090, 8, rdmapb.Code_OUT_OF_RANGE},
		{"empty", slots[notify.Region], notify.Region, 0, 0, rdmapb.Code_OUT_OF_RANGE},
		{"offset overflow", slots[notify.Region], notify.Region, 1 << 63, 1 << 63, rdmapb.Code_OUT_OF_RANGE},
		{"the real thing", slots[notify.Region], notify.Region, 8, 8, rdmapb.Code_OK},
	} {
		r.write(t, shm.EncodeEvent(9, tc.slot, tc.region, tc.off, tc.n, 5))
		m, _, err := r.read()
		if err != nil || len(m) != 13 || m[0] != shm.MsgAck || rdmapb.Code(binary.LittleEndian.Uint32(m[9:])) != tc.code {
			t.Fatalf("%s: ack %x %v, want code %s", tc.name, m, err, tc.code)
		}
	}
	if len(in.events) != 1 {
		t.Fatalf("%d events delivered, want only the real one", len(in.events))
	}

	// Messages: a fragment with no message started, a message over the
	// limit, a first packet longer than the message: each ends the
	// connection (and only it).
	for _, bad := range [][]byte{
		append([]byte{shm.MsgSendMore, 0, 0, 0, 0, 0, 0, 0, 3}, 1, 2, 3),
		shm.EncodeSend(3, 1<<40, nil),
		shm.EncodeSend(3, 2, []byte{1, 2, 3}),
	} {
		r := authed(t, p.b)
		r.write(t, bad)
		if m, _, err := r.read(); err == nil {
			t.Fatalf("malformed message %x answered %x", bad[:min(len(bad), 12)], m)
		}
	}
	checkServes(t, p)
}
