package memreg

// HostPinMin is the smallest host region a registry with a CUDA driver
// (SetCUDA) page-locks with it: a region of its own (not a pooled slot)
// of at least this many bytes is registered with the driver
// (HostRegister, portable to every context) before it becomes visible,
// and unregistered after it drained, before its memory is unmapped or
// kept for reuse. A device copy from or to it is then one DMA (the
// vendor's pinned copies, some 50 GB/s), where pageable memory goes
// through a pinned buffer and a CPU copy (shm's CUDA IPC path: about
// 5 GB/s). The price is the registration, once per allocation: about
// as long as touching the memory once. A registration the driver refuses
// leaves the region as it was.
const HostPinMin = 1 << 20

// pinHost page-locks r's memory where HostPinMin says so; r is not
// visible yet. The registration holds device 0's primary context (its
// pool entry, counted live until unpinHost).
func (g *Registry) pinHost(r *Region) {
	if r.kind != KindAllocated || r.dev != nil || r.slab != nil || uint64(len(r.mem)) < HostPinMin || g.CUDA() == nil {
		return
	}
	p, err := g.dev.pool(0)
	if err != nil {
		return
	}
	if err := p.pool.Driver().HostRegister(p.ctx, r.mem); err != nil {
		g.dev.put()
		return
	}
	r.hostPin = p
}

// unpinHost undoes pinHost; r drained (or never visible).
func (g *Registry) unpinHost(r *Region) {
	p := r.hostPin
	if p == nil {
		return
	}
	_ = p.pool.Driver().HostUnregister(p.ctx, r.mem)
	r.hostPin = nil
	g.dev.put()
}

// HostPinned reports whether r's memory is page-locked with the
// registry's CUDA driver (HostPinMin): a device copy may DMA straight
// from or to it. Valid while a Ref on r is held.
func (r *Region) HostPinned() bool { return r.hostPin != nil }
