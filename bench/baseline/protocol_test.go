package baseline

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestHeaderSlots: the slots field travels, 0 means one slot, and slots
// whose memory would pass MaxSize are refused.
func TestHeaderSlots(t *testing.T) {
	h, err := decodeHeader(header{mode: modeGet, slots: 8, size: 1 << 20, count: 3}.encode())
	if err != nil || h.slots != 8 || h.nslots() != 8 || h.size != 1<<20 || h.count != 3 {
		t.Fatalf("decoded %+v, %v", h, err)
	}
	if h, _ := decodeHeader(header{mode: modePut, size: 10, count: 1}.encode()); h.nslots() != 1 {
		t.Fatalf("no slots decoded as %d slots, want 1", h.nslots())
	}
	if _, err := decodeHeader(header{mode: modePut, slots: 2, size: MaxSize, count: 1}.encode()); err == nil {
		t.Fatal("2 slots of MaxSize accepted")
	}
	if _, err := decodeHeader(header{mode: modePut, slots: maxSlots + 1, size: 1, count: 1}.encode()); err == nil {
		t.Fatal("more than maxSlots slots accepted")
	}
}

// TestStreamSlots: a stream over slots moves every operation both ways.
func TestStreamSlots(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ln)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, op := range []string{"put", "get"} {
		if _, err := Stream(ctx, s.Addr(), op, Load{Size: 4096, Count: 100, Conns: 2, Slots: 7}); err != nil {
			t.Fatalf("%s over 7 slots: %v", op, err)
		}
	}
}
