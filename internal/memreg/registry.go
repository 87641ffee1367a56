package memreg

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/coarseclock"
)

// Hooks let a backend register regions with hardware. Register runs before
// a region becomes visible; Deregister runs after it is drained and before
// its memory is freed.
type Hooks interface {
	RegisterRegion(r *Region) error
	DeregisterRegion(r *Region) error
}

// Stats is a snapshot of a registry.
type Stats struct {
	Regions int    // regions registered (a cached registration counts once)
	Bytes   uint64 // bytes callers hold: what Limits count

	// Slabs is the number of slabs mapped (SlabSize bytes each, in use or
	// spare); their memory is not in Bytes.
	Slabs int
	// CacheHits and CacheMisses count Registers that reused a cached
	// registration and those that did not; CacheEntries is the number of
	// registrations indexed.
	CacheHits, CacheMisses uint64
	CacheEntries           int
}

// Registry holds the regions of one manager.
type Registry struct {
	ownerID   uint64
	ownerAddr atomic.Pointer[string]
	epoch     int64 // the clock of leases: CLOCK_MONOTONIC less epoch (now)
	limits    buffer.Limits
	pageSize  int

	mu sync.RWMutex // guards the fields below
	// hooks is set before the first region is created.
	hooks   []Hooks
	cutters []Cutter
	regions map[uint64]*Region
	nextID  uint64
	bytes   uint64
	count   int // regions reserved or registered and not yet freed
	closed  bool
	cache   *regCache

	dev   devices      // device memory (device.go); its own lock
	pool  pool         // its own lock
	owned *ownedSpares // spareMemfds; its own lock
	// unpooled: Allocate gives every region a memfd of its own
	// (SetUnpooled).
	unpooled atomic.Bool
	// exporting: readable regions get a memfd of their own unless a hook
	// pins memory (SetExporting).
	exporting atomic.Bool
}

// NewRegistry returns an empty registry for the manager ownerID. It does no I/O.
func NewRegistry(ownerID uint64, limits buffer.Limits) *Registry {
	r := &Registry{
		ownerID:  ownerID,
		limits:   limits,
		pageSize: os.Getpagesize(),
		regions:  make(map[uint64]*Region),
		nextID:   1,
		epoch:    coarseclock.Exact(),
		cache:    newRegCache(DefaultCacheEntries),
	}
	r.pool.maxBytes = limits.MaxBytes
	r.owned = &spareMemfds
	empty := ""
	r.ownerAddr.Store(&empty)
	coarseclock.Acquire() // the lease checks' clock; Close gives it back
	return r
}

// OwnerID returns the id of the owning manager.
func (g *Registry) OwnerID() uint64 { return g.ownerID }

// SetOwnerAddr sets the actor-system address written into new handles.
func (g *Registry) SetOwnerAddr(addr string) { g.ownerAddr.Store(&addr) }

// AddHooks registers backend hooks; call before creating regions.
func (g *Registry) AddHooks(h Hooks) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hooks = append(g.hooks, h)
}

func (g *Registry) reserve(size uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return rdmamgr.ErrClosed
	}
	if g.limits.MaxRegion > 0 && size > g.limits.MaxRegion {
		return fmt.Errorf("register %d bytes in one region, limit %d (serve --max-region): %w", size, g.limits.MaxRegion, rdmamgr.ErrLimit)
	}
	if g.limits.MaxBytes > 0 && (size > g.limits.MaxBytes || g.bytes > g.limits.MaxBytes-size) {
		return fmt.Errorf("register %d bytes with %d of %d in use (serve --max-registered): %w", size, g.bytes, g.limits.MaxBytes, rdmamgr.ErrLimit)
	}
	if g.limits.MaxRegions > 0 && g.count >= g.limits.MaxRegions {
		return fmt.Errorf("%d regions registered, the most allowed (serve --max-regions): %w", g.count, rdmamgr.ErrLimit)
	}
	g.bytes += size
	g.count++
	return nil
}

func (g *Registry) unreserve(size uint64) {
	g.mu.Lock()
	g.bytes -= size
	g.count--
	g.mu.Unlock()
}

// add registers r (kind, mem and access set; the memory fields for
// KindAllocated) with a fresh key and id: hooks first, then the index.
func (g *Registry) add(r *Region) (*Region, error) {
	r.holds = 1
	if r.dev == nil {
		r.size = uint64(len(r.mem))
	}
	if _, err := rand.Read(r.key[:]); err != nil {
		return nil, fmt.Errorf("region key: %w", err)
	}
	if r.kind == KindUser {
		r.pinner.Pin(&r.mem[0])
	}
	g.mu.Lock()
	// Device memory: DeviceHooks only (device_hooks.go).
	hooks := hooksFor(r, g.hooks)
	r.id = g.nextID // ids are never reused, so hooks may key by it
	g.nextID++
	g.mu.Unlock()
	undo := func(hooks []Hooks) {
		for _, h := range hooks {
			_ = h.DeregisterRegion(r)
		}
		if r.kind == KindUser {
			r.pinner.Unpin()
		}
	}
	for i, h := range hooks {
		if err := h.RegisterRegion(r); err != nil {
			undo(hooks[:i])
			return nil, fmt.Errorf("backend register: %w", err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		undo(hooks)
		return nil, rdmamgr.ErrClosed
	}
	g.regions[r.id] = r
	return r, nil
}

func (g *Registry) handle(r *Region) buffer.Buffer {
	return buffer.Buffer{
		OwnerID:   g.ownerID,
		OwnerAddr: *g.ownerAddr.Load(),
		Region:    r.id,
		Length:    r.size,
		Location:  r.Location(),
		Key:       r.key,
		Access:    r.access,
		RDMA:      r.RDMA,
	}
}

// lookup finds the region of a handle of this registry, checking its key.
func (g *Registry) lookup(b buffer.Buffer) (*Region, error) {
	if b.OwnerID != g.ownerID {
		return nil, fmt.Errorf("region %d not owned by this manager: %w", b.Region, rdmamgr.ErrReleased)
	}
	g.mu.RLock()
	r := g.regions[b.Region]
	g.mu.RUnlock()
	if r == nil {
		return nil, fmt.Errorf("region %d: %w", b.Region, rdmamgr.ErrReleased)
	}
	if !r.key.Equal(b.Key) {
		return nil, fmt.Errorf("region %d: %w", b.Region, rdmamgr.ErrBadKey)
	}
	return r, nil
}

func (g *Registry) hooksSnapshot() []Hooks {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.hooks
}

// Release releases the region of handle b (the key must match). Of a
// registration that several Registers hold (the registration cache), it
// drops one hold and returns, unless the region's lease ran out: then the
// registration ends for every holder. Otherwise it stops
// new references, waits until every reference is dropped or ctx ends,
// deregisters the region from the backends and frees its memory. When ctx
// ends first the region is still freed as soon as it drains, and the
// context error is returned.
func (g *Registry) Release(ctx context.Context, b buffer.Buffer) error {
	g.mu.Lock()
	r := g.regions[b.Region]
	if r == nil || b.OwnerID != g.ownerID {
		g.mu.Unlock()
		return fmt.Errorf("release region %d: %w", b.Region, rdmamgr.ErrReleased)
	}
	if !r.key.Equal(b.Key) {
		g.mu.Unlock()
		return fmt.Errorf("release region %d: %w", b.Region, rdmamgr.ErrBadKey)
	}
	if l := r.lease.Load(); r.holds > 1 && (l == 0 || g.now() <= l) { // a registration other Registers still hold
		r.holds--
		g.mu.Unlock()
		return nil
	}
	delete(g.regions, r.id)
	g.cache.remove(r)
	g.mu.Unlock()
	return g.finish(ctx, r)
}

func (g *Registry) finish(ctx context.Context, r *Region) error {
	r.refs.Close()
	g.cut(r)
	if r.refs.Users() == 0 { // closed and empty: nobody can enter any more
		g.free(r)
		return nil
	}
	select {
	case <-r.refs.Drained(): // already drained: succeed even if ctx is done
		g.free(r)
		return nil
	default:
	}
	select {
	case <-r.refs.Drained():
		g.free(r)
		return nil
	case <-ctx.Done():
		go func() { <-r.refs.Drained(); g.free(r) }() // freed once drained; owned by the region's references
		return fmt.Errorf("release region %d: %w", r.id, ctx.Err())
	}
}

func (g *Registry) free(r *Region) {
	g.mu.RLock()
	hooks := hooksFor(r, g.hooks)
	g.mu.RUnlock()
	for _, h := range hooks {
		_ = h.DeregisterRegion(r)
	}
	r.unpinHost()
	switch {
	case r.kind == KindDevice:
		g.freeDevice(r)
	case r.slab != nil && r.quarantined.Load():
		// Another process may still write the slot: it stays taken, and
		// the slab mapped.
	case r.slab != nil:
		clear(r.mem) // no previous owner's byte in a reused slot
		if s := g.pool.put(r.slab, r.fdOff); s != nil {
			g.freeSlab(s)
		}
	case r.kind == KindAllocated && r.exported.Load():
		memfdUnmap(r.fd, r.mapping) // another process may hold the fd: never reuse it
	case r.kind == KindAllocated && r.quarantined.Load():
		memfdUnmap(r.fd, r.mapping)
	case r.kind == KindAllocated:
		g.owned.put(ownedMap{fd: r.fd, mem: r.mapping})
	case r.kind == KindUser:
		r.pinner.Unpin()
	case r.kind == KindProxy:
		if c, ok := r.gate.(GateCloser); ok {
			c.Close() // drained: no Ref is in the gate any more
		}
	}
	g.unreserve(r.size)
}

// freeSlab unmaps an empty slab once the hooks forgot it.
func (g *Registry) freeSlab(s *Slab) {
	for _, h := range g.hooksSnapshot() {
		if sh, ok := h.(SlabHooks); ok {
			_ = sh.DeregisterSlab(s)
		}
	}
	memfdUnmap(s.fd, s.mem)
}

// Regions returns a snapshot of the registered regions.
func (g *Registry) Regions() []*Region {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]*Region, 0, len(g.regions))
	for _, r := range g.regions {
		out = append(out, r)
	}
	return out
}

// Stats returns counts of regions and bytes.
func (g *Registry) Stats() Stats {
	g.mu.RLock()
	defer g.mu.RUnlock()
	st := Stats{Regions: len(g.regions), Bytes: g.bytes, Slabs: g.pool.stats()}
	st.CacheHits, st.CacheMisses, st.CacheEntries = g.cache.hits, g.cache.misses, g.cache.lru.Len()
	return st
}

// Close releases every region, waiting for references until ctx ends.
// It is idempotent.
func (g *Registry) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	defer coarseclock.Release()
	regs := make([]*Region, 0, len(g.regions))
	for id, r := range g.regions {
		regs = append(regs, r)
		delete(g.regions, id)
		g.cache.remove(r)
	}
	g.mu.Unlock()
	for _, s := range g.pool.close() {
		g.freeSlab(s)
	}
	var first error
	for _, r := range regs {
		if err := g.finish(ctx, r); err != nil && first == nil {
			first = err
		}
	}
	g.dev.close() // the device pools go once the last device region is freed
	return first
}

// pinsMemory reports whether a hook registers memory with a device (an
// RDMA backend): such pages must not be replaced under it.
func (g *Registry) pinsMemory() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.hooks) > 0
}
