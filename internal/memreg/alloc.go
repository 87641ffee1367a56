package memreg

import (
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Allocate makes size bytes of zeroed, memfd-backed memory off the Go heap
// and registers it with the given access. Up to MaxPooled bytes come from
// a slot of a slab (pool.go); larger sizes, or any size once slab memory
// reaches Limits.MaxBytes, get a memfd and mapping of their own (page
// aligned). Either way the region has its own id and key.
func (g *Registry) Allocate(size uint64, access buffer.Access) (buffer.Buffer, error) {
	if size == 0 {
		return buffer.Buffer{}, fmt.Errorf("allocate 0 bytes: %w", rdmamgr.ErrInvalid)
	}
	if !access.Valid() {
		return buffer.Buffer{}, fmt.Errorf("allocate with access %#x: %w", uint32(access), rdmamgr.ErrInvalid)
	}
	if size > 1<<46 {
		return buffer.Buffer{}, fmt.Errorf("allocate %d bytes: %w", size, rdmamgr.ErrLimit)
	}
	if err := g.reserve(size); err != nil {
		return buffer.Buffer{}, err
	}
	var r *Region
	err := errPoolFull
	if g.pooledFor(access) {
		r, err = g.allocPooled(size, access)
	}
	if errors.Is(err, errPoolFull) {
		r, err = g.allocOwn(size, access)
	}
	if err != nil {
		g.unreserve(size)
		return buffer.Buffer{}, err
	}
	return g.handle(r), nil
}

// SetUnpooled makes Allocate give every later region a memfd and mapping
// of its own, never a slot of a slab. A process attached to a host agent
// needs it: the agent maps the process's own (local) regions too, and a
// pooled region's first export moves it out of its slab only once no one
// else holds it (ExportFD), while the process holds its local region for
// the operation the agent is to run on it: the export would fail.
func (g *Registry) SetUnpooled() { g.unpooled.Store(true) }

// SetExporting says that the registry's regions may be exported to other
// processes of the host (Ref.ExportFD: the shm backend sets it). Allocate
// then gives every later region that grants read access a memfd of its
// own, never a slot of a slab, unless a hook pins memory (such a registry
// exports nothing): a region is exported as it was allocated, its pages
// never moved while the owner may be writing them (a move copies the
// pages, and a store the owner makes between the copy and the remap would
// be lost). Regions without read access, which are never exported, stay
// pooled.
func (g *Registry) SetExporting() { g.exporting.Store(true) }

// pooledFor reports whether Allocate may give a region with access a slot
// of a slab.
func (g *Registry) pooledFor(access buffer.Access) bool {
	switch {
	case g.unpooled.Load():
		return false
	case g.exporting.Load() && access.Allows(buffer.AccessRead):
		return g.pinsMemory()
	}
	return true
}

// allocPooled registers a slot of a slab; errPoolFull when size is not
// pooled or the slab cap is reached.
func (g *Registry) allocPooled(size uint64, access buffer.Access) (*Region, error) {
	c, ok := classOf(size)
	if !ok {
		return nil, errPoolFull
	}
	s, off, err := g.pool.get(c)
	if err != nil {
		return nil, err
	}
	r, err := g.add(&Region{kind: KindAllocated, mem: s.mem[off : off+size : off+size], access: access, fd: s.fd, fdOff: off, slab: s})
	if err != nil {
		clear(s.mem[off : off+size]) // a failed hook may have touched it
		if s := g.pool.put(s, off); s != nil {
			g.freeSlab(s)
		}
		return nil, err
	}
	return r, nil
}

// allocOwn registers a memfd of its own, page rounded: a spare one of the
// same size (owned.go) or a new one.
func (g *Registry) allocOwn(size uint64, access buffer.Access) (*Region, error) {
	rounded := int((size + uint64(g.pageSize) - 1) &^ uint64(g.pageSize-1))
	m, ok := g.owned.get(rounded)
	if !ok {
		fd, mapping, err := memfdMapOpen("rdmamgr-region", rounded)
		if err != nil {
			return nil, err
		}
		m = ownedMap{fd: fd, mem: mapping}
	}
	r, err := g.add(&Region{kind: KindAllocated, mem: m.mem[:size:size], access: access, fd: m.fd, mapping: m.mem})
	if err != nil {
		g.owned.put(m)
		return nil, err
	}
	return r, nil
}

// Register registers the caller's memory p in place, pinning it until the
// region is released. The caller must not let p go out of use before.
//
// A registration of the same memory (same first byte, same length, same
// access) that is still held, not revoked and without a lease is reused:
// Register returns its handle (same region, same key) and counts one more
// holder, without pinning, registering or counting against Limits again.
// Each successful Register is matched by one Release; the last one
// releases the registration (see the package doc).
func (g *Registry) Register(p []byte, access buffer.Access) (buffer.Buffer, error) {
	if len(p) == 0 {
		return buffer.Buffer{}, fmt.Errorf("register empty slice: %w", rdmamgr.ErrInvalid)
	}
	if !access.Valid() {
		return buffer.Buffer{}, fmt.Errorf("register with access %#x: %w", uint32(access), rdmamgr.ErrInvalid)
	}
	k := keyOf(p, access)
	if b, ok := g.cachedHandle(k); ok {
		return b, nil
	}
	if err := g.reserve(uint64(len(p))); err != nil {
		return buffer.Buffer{}, err
	}
	r, err := g.add(&Region{kind: KindUser, mem: p, access: access})
	if err != nil {
		g.unreserve(uint64(len(p)))
		return buffer.Buffer{}, err
	}
	g.mu.Lock()
	if g.regions[r.id] == r && !r.revoked.Load() && r.lease.Load() == 0 {
		g.cache.put(k, r)
	}
	g.mu.Unlock()
	return g.handle(r), nil
}

// cachedHandle takes one more hold on the cached registration of k.
func (g *Registry) cachedHandle(k cacheKey) (buffer.Buffer, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return buffer.Buffer{}, false
	}
	r := g.cache.get(k)
	if r != nil && (r.revoked.Load() || r.lease.Load() != 0) { // not shareable: forget it
		g.cache.remove(r)
		r = nil
	}
	if r == nil {
		g.cache.misses++
		return buffer.Buffer{}, false
	}
	g.cache.hits++
	r.holds++
	return g.handle(r), true
}

// uncache makes r unshareable: a later Register of its memory registers it
// anew (Revoke and SetLease call it: they act for every holder).
func (g *Registry) uncache(r *Region) {
	g.mu.Lock()
	g.cache.remove(r)
	g.mu.Unlock()
}
