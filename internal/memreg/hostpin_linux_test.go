package memreg

import (
	"context"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// TestPinHost: PinHost page-locks a host region of its own of HostPinMin
// bytes or more with the driver, once, and nothing else (a smaller one, a
// slot of a slab, device memory, a registry without a driver); Revoke,
// which maps fresh pages under an exported region, undoes it first (a
// registration stays with the pages it locked), and the next PinHost
// locks the new pages; Release undoes it, and device 0's context goes
// back with it.
func TestPinHost(t *testing.T) {
	g, w := newDevReg(t, buffer.Limits{})
	g.SetExporting()
	live := func() int { return w.Stats().LiveHost }
	big := mustAlloc(t, g, 2*HostPinMin, buffer.AccessReadWrite)
	r := g.regionOf(t, big)
	if live() != 0 || r.HostPinned() {
		t.Fatalf("at allocation: %d host ranges registered, pinned %v: want none", live(), r.HostPinned())
	}
	small := mustAlloc(t, g, HostPinMin/2, buffer.AccessReadWrite)
	dev := mustAllocAt(t, g, buffer.CUDA(0), 2*HostPinMin, buffer.AccessReadWrite)
	for name, reg := range map[string]*Region{"small": g.regionOf(t, small), "device": g.regionOf(t, dev)} {
		if g.PinHost(reg, 0) {
			t.Fatalf("%s region page-locked", name)
		}
	}
	if !g.PinHost(r, 0) || !g.PinHost(r, 1) || !r.HostPinned() || live() != 1 {
		t.Fatalf("PinHost twice: pinned %v, %d host ranges registered: want once", r.HostPinned(), live())
	}
	// An exported region, revoked: its pages move, the lock goes first.
	fd, _, err := exportOf(t, g, big)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if err := g.Revoke(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	if r.HostPinned() || live() != 0 {
		t.Fatalf("after Revoke moved the pages: pinned %v, %d host ranges registered", r.HostPinned(), live())
	}
	if !g.PinHost(r, 0) || live() != 1 {
		t.Fatalf("PinHost after the move: %d host ranges registered, want 1", live())
	}
	if err := g.Release(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	if live() != 0 {
		t.Fatalf("after Release: %d host ranges registered", live())
	}
	plain := newReg(t, buffer.Limits{})
	h := mustAlloc(t, plain, 2*HostPinMin, buffer.AccessReadWrite)
	if plain.PinHost(plain.regionOf(t, h), 0) {
		t.Fatal("a registry without a driver page-locked a region")
	}
}
