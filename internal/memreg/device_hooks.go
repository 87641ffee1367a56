package memreg

import "github.com/rdmamgr/rdmamgr/internal/cuda"

// DeviceHooks is implemented by Hooks that register device memory with
// hardware too (the ibverbs backend, through dma-buf): of a registry's
// hooks only those whose RegistersDevice is true see device regions
// (RegisterRegion, Revoker's RevokeRegion, DeregisterRegion, in the same
// order as for host memory: DeregisterRegion after the region drained and
// before its memory goes back to the device pool). A device region that
// cannot be registered (no dma-buf on the device, the driver or the NIC)
// should be left without an RDMA key and RegisterRegion return nil:
// an error fails the allocation, while other paths (TCP's staging, shm's
// IPC) still reach the region.
type DeviceHooks interface {
	RegistersDevice() bool
}

// hooksFor returns the hooks that see r: all of them for host memory,
// those that register device memory for a device region.
func hooksFor(r *Region, hooks []Hooks) []Hooks {
	if r.dev == nil {
		return hooks
	}
	var out []Hooks
	for _, h := range hooks {
		if takesDevice(h) {
			out = append(out, h)
		}
	}
	return out
}

func takesDevice(h Hooks) bool {
	dh, ok := h.(DeviceHooks)
	return ok && dh.RegistersDevice()
}

// DeviceExtent is the device allocation a device region lies in: its
// pool's slab (cuda.PoolSlab bytes) when it is a slot, else its own
// allocation; Off is the region's offset in it. A backend that exports
// device memory once per allocation (a dma-buf fd) keys by (Ctx, Base).
type DeviceExtent struct {
	Driver cuda.Driver
	Ctx    cuda.Context
	Dev    int
	Base   cuda.DevicePtr
	Size   uint64
	Off    uint64
}

// DeviceExtent returns the allocation r lies in (ok false for host
// memory). Valid while r is registered.
func (r *Region) DeviceExtent() (DeviceExtent, bool) {
	if r.dev == nil {
		return DeviceExtent{}, false
	}
	p := r.dev.pool
	base, size := r.dev.block.Extent()
	return DeviceExtent{Driver: p.pool.Driver(), Ctx: p.ctx, Dev: p.dev, Base: base, Size: size, Off: uint64(r.dev.block.Ptr - base)}, true
}
