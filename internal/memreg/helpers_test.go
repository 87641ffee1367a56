package memreg

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/testscale"
)

const testOwner = 0x1122334455667788

// liveness bounds waits for events that must happen; tests never assert
// on how long anything took.
var liveness = testscale.Timeout(10 * time.Second)

func newReg(t testing.TB, lim buffer.Limits) *Registry {
	t.Helper()
	g := NewRegistry(testOwner, lim)
	g.SetOwnerAddr("127.0.0.1:18090")
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return g
}

func mustAlloc(t testing.TB, g *Registry, size uint64, a buffer.Access) buffer.Buffer {
	t.Helper()
	b, err := g.Allocate(size, a)
	if err != nil {
		t.Fatalf("Allocate(%d, %v): %v", size, a, err)
	}
	return b
}

func mustBytes(t testing.TB, g *Registry, b buffer.Buffer) []byte {
	t.Helper()
	mem, err := g.Bytes(b)
	if err != nil {
		t.Fatalf("Bytes(%v): %v", b, err)
	}
	return mem
}

func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

// eventually polls cond until it holds; it fails the test only if cond
// never holds within the liveness bound.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// idle reports whether st shows nothing held: no region, no byte (slabs
// may stay mapped as spares, the cache counters only grow).
func idle(st Stats) bool { return st.Regions == 0 && st.Bytes == 0 }

// alignOf is the alignment Allocate promises for size bytes: the slot size
// (a power of two from 4 KiB) when pooled, capped at the page size.
func alignOf(size uint64) uintptr {
	page := uintptr(os.Getpagesize())
	c, ok := classOf(size)
	if !ok {
		return page
	}
	return min(uintptr(1)<<(c+minClassShift), page)
}
