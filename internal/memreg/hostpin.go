package memreg

import (
	"sync"
	"sync/atomic"
)

// Host regions page-locked for device copies. A data path that copies
// between a host region of this registry and device memory (shm's CUDA
// IPC path) asks PinHost first: a region of its own (not a pooled slot)
// of HostPinMin to HostPinMax bytes is then registered with the CUDA
// driver (HostRegister, portable to every context), once, and a device
// copy from or to it is one DMA (the vendor's pinned copies, some
// 50 GB/s), where pageable memory goes through a pinned buffer and a CPU
// copy (about 5 GB/s). Only regions that are copied so get locked, and
// only while they live: the registration is undone after the region
// drained, before its memory is unmapped or kept for reuse (free), and
// before Revoke maps fresh pages under it (move: a registration stays
// with the pages it locked). A registration the driver refuses is not
// tried again on that region.
const (
	HostPinMin = 1 << 20
	HostPinMax = 4 << 30
)

// hostPin is a region's registration: the device pool (its primary
// context, counted live in its registry's devices) it was made through.
type hostPin struct {
	mu      sync.Mutex                 // serializes pinning and unpinning
	pool    atomic.Pointer[devicePool] // set while registered
	ds      *devices                   // whose pool: put back on unpin; guarded by mu
	refused atomic.Bool
}

// PinHost page-locks r's memory with the registry's CUDA driver in device
// dev's context, unless it is already, and reports whether it is. The
// caller holds a Ref on r (so Revoke's move waits for it). A region
// outside HostPinMin..HostPinMax, not a host region of its own, or one
// the driver refused, reports false: copy it as pageable memory.
func (g *Registry) PinHost(r *Region, dev int) bool {
	p := &r.pin
	if p.pool.Load() != nil {
		return true
	}
	n := uint64(len(r.mem))
	if p.refused.Load() || r.kind != KindAllocated || r.dev != nil || r.slab != nil || n < HostPinMin || n > HostPinMax {
		return false
	}
	d := g.CUDA()
	if d == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pool.Load() != nil {
		return true
	}
	if p.refused.Load() {
		return false
	}
	pool, err := g.dev.pool(dev)
	if err != nil {
		return false
	}
	if err := d.HostRegister(pool.ctx, r.mem); err != nil {
		g.dev.put()
		p.refused.Store(true)
		return false
	}
	p.ds = &g.dev
	p.pool.Store(pool)
	return true
}

// unpinHost undoes PinHost; nothing copies from or to r (it drained, or
// Revoke's move waits for its users).
func (r *Region) unpinHost() {
	p := &r.pin
	p.mu.Lock()
	defer p.mu.Unlock()
	pool := p.pool.Load()
	if pool == nil {
		return
	}
	_ = pool.pool.Driver().HostUnregister(pool.ctx, r.mem)
	p.pool.Store(nil)
	p.ds.put()
	p.ds = nil
}

// HostPinned reports whether r's memory is page-locked with the CUDA
// driver (PinHost). Valid while a Ref on r is held.
func (r *Region) HostPinned() bool { return r.pin.pool.Load() != nil }
