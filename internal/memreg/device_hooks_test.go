package memreg

import (
	"context"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
)

// devHooks is a DeviceHooks that records what it sees, and at
// DeregisterRegion of a device region checks that its memory is still
// the region's (not yet back in the pool: the device's stats count it in
// use).
type devHooks struct {
	t    *testing.T
	w    *cudafake.World
	mu   sync.Mutex
	log  []string
	ext  map[uint64]DeviceExtent
	live int // device allocations live at the last DeregisterRegion
}

func (h *devHooks) RegistersDevice() bool { return true }

func (h *devHooks) RegisterRegion(r *Region) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := r.DeviceExtent()
	if !ok {
		h.log = append(h.log, "reg host")
		return nil
	}
	if h.ext == nil {
		h.ext = map[uint64]DeviceExtent{}
	}
	h.ext[r.ID()] = e
	r.RDMA = buffer.RDMAKey{Addr: uint64(e.Base) + e.Off, RKey: 7}
	h.log = append(h.log, "reg dev")
	return nil
}

func (h *devHooks) RevokeRegion(r *Region) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = append(h.log, "revoke")
	return nil
}

func (h *devHooks) DeregisterRegion(r *Region) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := r.DeviceExtent(); ok {
		h.live = h.w.Stats().LiveAllocs
		h.log = append(h.log, "dereg dev")
	}
	return nil
}

// TestDeviceHooks: a hook that says it registers device memory
// (DeviceHooks) sees device regions: RegisterRegion with the region's
// extent (a slot's slab and offset; an allocation of its own at offset
// 0), the RDMA key it sets in the handle, RevokeRegion at Revoke, and
// DeregisterRegion before the memory goes back (the slab's allocation
// still live then); a plain hook still sees none.
func TestDeviceHooks(t *testing.T) {
	w := cudafake.NewWorld(cudafake.Config{})
	d := w.Process()
	defer d.Close()
	g := newReg(t, buffer.Limits{})
	plain := &countHooks{}
	dh := &devHooks{t: t, w: w}
	g.AddHooks(plain)
	g.AddHooks(dh)
	g.SetCUDA(d, nil)

	a := mustAllocAt(t, g, buffer.CUDA(0), 100, buffer.AccessReadWrite)
	b := mustAllocAt(t, g, buffer.CUDA(0), 4096, buffer.AccessReadWrite)
	own := mustAllocAt(t, g, buffer.CUDA(0), 3<<20, buffer.AccessRead)
	if plain.reg != 0 {
		t.Fatalf("a plain hook saw %d device regions", plain.reg)
	}
	ea, eb, eo := dh.ext[a.Region], dh.ext[b.Region], dh.ext[own.Region]
	if ea.Size != cuda.PoolSlab || ea.Base != eb.Base || ea.Off != 0 || eb.Off != 4096 {
		t.Fatalf("slot extents %+v %+v: want one slab, offsets 0 and 4096", ea, eb)
	}
	if eo.Size != 3<<20 || eo.Off != 0 || eo.Base == ea.Base || eo.Driver != cuda.Driver(d) {
		t.Fatalf("own allocation's extent %+v", eo)
	}
	if a.RDMA.RKey != 7 || a.RDMA.Addr != uint64(ea.Base) {
		t.Fatalf("handle's RDMA key %+v: not the hook's", a.RDMA)
	}
	ref, err := g.AcquireLocalAny(&b)
	if err != nil {
		t.Fatal(err)
	}
	span, _ := ref.Device()
	ref.Release()
	if span.Ptr != eb.Base+cuda.DevicePtr(eb.Off) {
		t.Fatalf("extent base %#x + %d is not the region's memory %#x", eb.Base, eb.Off, span.Ptr)
	}
	if err := g.Revoke(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if dh.log[len(dh.log)-1] != "revoke" {
		t.Fatalf("log %v: no revoke", dh.log)
	}
	for _, h := range []buffer.Buffer{a, b} {
		if err := g.Release(context.Background(), h); err != nil {
			t.Fatal(err)
		}
	}
	// The slab (and the own allocation) were live at b's DeregisterRegion:
	// its memory had not gone back yet.
	if dh.live != 2 {
		t.Fatalf("%d device allocations live at the last DeregisterRegion, want 2 (the slab's and the own one)", dh.live)
	}
	if err := g.Release(context.Background(), own); err != nil {
		t.Fatal(err)
	}
	if dh.live != 2 || w.Stats().LiveAllocs != 1 { // the own allocation freed after, the slab kept as a spare
		t.Fatalf("%d device allocations live at the own one's DeregisterRegion, %d after: want 2, 1", dh.live, w.Stats().LiveAllocs)
	}
	want := []string{"reg dev", "reg dev", "reg dev", "revoke", "dereg dev", "dereg dev", "dereg dev"}
	if len(dh.log) != len(want) {
		t.Fatalf("log %v, want %v", dh.log, want)
	}
	for i := range want {
		if dh.log[i] != want[i] {
			t.Fatalf("log %v, want %v", dh.log, want)
		}
	}
	if plain.dereg != 0 {
		t.Fatalf("a plain hook deregistered %d device regions", plain.dereg)
	}
	mustAlloc(t, g, 10, buffer.AccessRead)
	if plain.reg != 1 || dh.log[len(dh.log)-1] != "reg host" {
		t.Fatalf("host region: plain hook %d, device hook log %v", plain.reg, dh.log)
	}
}
