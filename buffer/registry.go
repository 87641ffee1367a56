package buffer

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Hooks let a backend register regions with hardware. Register runs before
// a region becomes visible; Deregister runs after it is drained and before
// its memory is freed.
type Hooks interface {
	RegisterRegion(r *Region) error
	DeregisterRegion(r *Region) error
}

// Limits bound what a registry holds. Zero fields mean no limit.
type Limits struct {
	MaxBytes   uint64 // registered bytes in total
	MaxRegions int    // number of regions
	MaxRegion  uint64 // bytes of one region
}

// Stats is a snapshot of a registry.
type Stats struct {
	Regions int
	Bytes   uint64
}

// Registry holds the regions of one manager.
type Registry struct {
	ownerID   uint64
	ownerAddr atomic.Pointer[string]
	epoch     time.Time // the clock of leases: time.Since(epoch)
	limits    Limits
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
}

// NewRegistry returns an empty registry for the manager ownerID. It does no I/O.
func NewRegistry(ownerID uint64, limits Limits) *Registry {
	r := &Registry{
		ownerID:  ownerID,
		limits:   limits,
		pageSize: os.Getpagesize(),
		regions:  make(map[uint64]*Region),
		nextID:   1,
		epoch:    time.Now(),
	}
	empty := ""
	r.ownerAddr.Store(&empty)
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

// Allocate maps size bytes of page-aligned memory off the Go heap and
// registers it with the given access.
func (g *Registry) Allocate(size uint64, access Access) (Buffer, error) {
	if size == 0 {
		return Buffer{}, fmt.Errorf("allocate 0 bytes: %w", ErrInvalid)
	}
	if !access.Valid() {
		return Buffer{}, fmt.Errorf("allocate with access %#x: %w", uint32(access), ErrInvalid)
	}
	if size > 1<<46 {
		return Buffer{}, fmt.Errorf("allocate %d bytes: %w", size, ErrExhausted)
	}
	if err := g.reserve(size); err != nil {
		return Buffer{}, err
	}
	rounded := (size + uint64(g.pageSize) - 1) &^ uint64(g.pageSize-1)
	mem, err := mmapAnon(int(rounded))
	if err != nil {
		g.unreserve(size)
		return Buffer{}, fmt.Errorf("mmap %d bytes: %w", rounded, err)
	}
	r, err := g.add(KindAllocated, mem[:size:size], access, mem)
	if err != nil {
		_ = munmap(mem)
		g.unreserve(size)
		return Buffer{}, err
	}
	return g.handle(r), nil
}

// Register registers the caller's memory p in place, pinning it until the
// region is released. The caller must not let p go out of use before.
func (g *Registry) Register(p []byte, access Access) (Buffer, error) {
	if len(p) == 0 {
		return Buffer{}, fmt.Errorf("register empty slice: %w", ErrInvalid)
	}
	if !access.Valid() {
		return Buffer{}, fmt.Errorf("register with access %#x: %w", uint32(access), ErrInvalid)
	}
	if err := g.reserve(uint64(len(p))); err != nil {
		return Buffer{}, err
	}
	r, err := g.add(KindUser, p, access, nil)
	if err != nil {
		g.unreserve(uint64(len(p)))
		return Buffer{}, err
	}
	return g.handle(r), nil
}

func (g *Registry) reserve(size uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	if g.limits.MaxRegion > 0 && size > g.limits.MaxRegion {
		return fmt.Errorf("register %d bytes in one region, limit %d: %w", size, g.limits.MaxRegion, ErrExhausted)
	}
	if g.limits.MaxBytes > 0 && (size > g.limits.MaxBytes || g.bytes > g.limits.MaxBytes-size) {
		return fmt.Errorf("register %d bytes with %d of %d in use: %w", size, g.bytes, g.limits.MaxBytes, ErrExhausted)
	}
	if g.limits.MaxRegions > 0 && g.count >= g.limits.MaxRegions {
		return fmt.Errorf("%d regions registered: %w", g.count, ErrExhausted)
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

// mapping is the whole mmap for KindAllocated (nil for user memory).
func (g *Registry) add(kind Kind, mem []byte, access Access, mapping []byte) (*Region, error) {
	r := &Region{kind: kind, mem: mem, access: access, drained: make(chan struct{})}
	if _, err := rand.Read(r.key[:]); err != nil {
		return nil, fmt.Errorf("region key: %w", err)
	}
	if kind == KindUser {
		r.pinner.Pin(&mem[0])
	}
	r.mapping = mapping
	g.mu.Lock()
	hooks := g.hooks
	r.id = g.nextID // ids are never reused, so hooks may key by it
	g.nextID++
	g.mu.Unlock()
	for i, h := range hooks {
		if err := h.RegisterRegion(r); err != nil {
			for _, h := range hooks[:i] {
				_ = h.DeregisterRegion(r)
			}
			if kind == KindUser {
				r.pinner.Unpin()
			}
			return nil, fmt.Errorf("backend register: %w", err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		for _, h := range hooks {
			_ = h.DeregisterRegion(r)
		}
		if kind == KindUser {
			r.pinner.Unpin()
		}
		return nil, ErrClosed
	}
	g.regions[r.id] = r
	return r, nil
}

func (g *Registry) handle(r *Region) Buffer {
	return Buffer{
		OwnerID:   g.ownerID,
		OwnerAddr: *g.ownerAddr.Load(),
		Region:    r.id,
		Length:    uint64(len(r.mem)),
		Key:       r.key,
		Access:    r.access,
		RDMA:      r.RDMA,
	}
}

// Acquire checks that [off, off+n) of region id may be used with access need
// under key, and takes a reference that keeps the memory registered until
// r.Unref. need == 0 is the owner's local use (no access check). The check
// order is fixed: region, key, access, bounds.
func (g *Registry) Acquire(id uint64, key Key, off, n uint64, need Access) (*Region, []byte, error) {
	g.mu.RLock()
	r := g.regions[id]
	g.mu.RUnlock()
	if r == nil {
		return nil, nil, ErrReleased
	}
	if !r.key.Equal(key) {
		return nil, nil, ErrBadKey
	}
	if !r.access.Allows(need) {
		return nil, nil, ErrAccess
	}
	if err := CheckRange(uint64(len(r.mem)), off, n); err != nil {
		return nil, nil, err
	}
	if need != 0 {
		// Counted before the checks, so Revoke, which sets the flag and
		// then waits for the count, never misses a request.
		r.remote.Add(1)
		if r.revoked.Load() {
			r.remote.Add(-1)
			return nil, nil, ErrRevoked
		}
		if l := r.lease.Load(); l != 0 && g.now() > l {
			r.remote.Add(-1)
			return nil, nil, ErrExpired
		}
	}
	if !r.tryRef() {
		if need != 0 {
			r.remote.Add(-1)
		}
		return nil, nil, ErrReleased
	}
	return r, r.mem[off : off+n : off+n], nil
}

func (g *Registry) now() int64 { return int64(time.Since(g.epoch)) }

// SetLease gives remote access to handle b's region a lease of d from now,
// on the owner's clock (d == 0 removes the lease). Renewing is setting it
// again. It fails on a revoked, expired or released region.
func (g *Registry) SetLease(b Buffer, d time.Duration) error {
	r, err := g.lookup(b)
	if err != nil {
		return err
	}
	if r.revoked.Load() {
		return fmt.Errorf("lease of region %d: %w", r.id, ErrRevoked)
	}
	for {
		old := r.lease.Load()
		if old != 0 && g.now() > old {
			return fmt.Errorf("lease of region %d: %w", r.id, ErrExpired)
		}
		var next int64
		if d > 0 {
			next = g.now() + int64(d)
		}
		if r.lease.CompareAndSwap(old, next) {
			g.cut(r) // a shorter lease ends stalled requests sooner
			return nil
		}
	}
}

// LeaseLeft returns how long the region's lease still runs (0, false
// without a lease).
func (g *Registry) LeaseLeft(r *Region) (time.Duration, bool) {
	l := r.lease.Load()
	if l == 0 {
		return 0, false
	}
	return max(time.Duration(l-g.now()), 0), true
}

// Revoke stops remote access to handle b's region: requests not yet
// admitted fail with ErrRevoked, and Revoke returns once the admitted ones
// have finished, so no remote request touches the region after it returns
// nil. Cutters end admitted requests whose payload is stalled, so a holder
// that stops sending cannot hold Revoke (or Release) for long. The owner's own use of the region goes on. When ctx ends first the
// revocation still holds for new requests and ctx's error is returned.
func (g *Registry) Revoke(ctx context.Context, b Buffer) error {
	r, err := g.lookup(b)
	if err != nil {
		return err
	}
	r.revoked.Store(true)
	g.cut(r)
	for _, h := range g.hooksSnapshot() {
		if rv, ok := h.(Revoker); ok {
			if err := rv.RevokeRegion(r); err != nil {
				return fmt.Errorf("revoke region %d: %w", r.id, err)
			}
		}
	}
	return waitZero(ctx, &r.remote, r.id)
}

// Revoker is implemented by hooks that must cut hardware access when a
// region is revoked (an RDMA backend invalidates its remote key).
type Revoker interface {
	RevokeRegion(r *Region) error
}

// waitZero waits until n drops to zero; remote requests hold references
// for one frame's I/O, so a short poll is enough.
func waitZero(ctx context.Context, n *atomic.Int64, id uint64) error {
	d := 50 * time.Microsecond
	for n.Load() != 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("revoke region %d: requests still in flight: %w", id, ctx.Err())
		}
		d = min(2*d, 5*time.Millisecond)
	}
	return nil
}

// Expired returns handles of regions whose lease ran out (for a reaper).
func (g *Registry) Expired() []*Region {
	now := g.now()
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []*Region
	for _, r := range g.regions {
		if l := r.lease.Load(); l != 0 && now > l {
			out = append(out, r)
		}
	}
	return out
}

// Handle returns a handle to the whole of region r.
func (g *Registry) Handle(r *Region) Buffer { return g.handle(r) }

// lookup finds the region of a handle of this registry, checking its key.
func (g *Registry) lookup(b Buffer) (*Region, error) {
	if b.OwnerID != g.ownerID {
		return nil, fmt.Errorf("region %d not owned by this manager: %w", b.Region, ErrReleased)
	}
	g.mu.RLock()
	r := g.regions[b.Region]
	g.mu.RUnlock()
	if r == nil {
		return nil, fmt.Errorf("region %d: %w", b.Region, ErrReleased)
	}
	if !r.key.Equal(b.Key) {
		return nil, fmt.Errorf("region %d: %w", b.Region, ErrBadKey)
	}
	return r, nil
}

func (g *Registry) hooksSnapshot() []Hooks {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.hooks
}

// Local resolves a handle of this registry to its memory for the owner's own
// use, taking a reference the caller drops with r.Unref.
func (g *Registry) Local(b Buffer) (*Region, []byte, error) {
	if b.OwnerID != g.ownerID {
		return nil, nil, fmt.Errorf("%v is not owned by manager %016x: %w", b, g.ownerID, ErrInvalid)
	}
	r, mem, err := g.Acquire(b.Region, b.Key, b.Offset, b.Length, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("local %v: %w", b, err)
	}
	return r, mem, nil
}

// Bytes returns the memory of a local handle without taking a reference: it
// is for the owner that filled or reads the buffer between transfers. The
// slice is invalid once the buffer is released.
func (g *Registry) Bytes(b Buffer) ([]byte, error) {
	r, mem, err := g.Local(b)
	if err != nil {
		return nil, err
	}
	r.Unref()
	return mem, nil
}

// Release releases the region of handle b (the key must match). It stops
// new references, waits until every reference is dropped or ctx ends,
// deregisters the region from the backends and frees its memory. When ctx
// ends first the region is still freed as soon as it drains, and the
// context error is returned.
func (g *Registry) Release(ctx context.Context, b Buffer) error {
	g.mu.Lock()
	r := g.regions[b.Region]
	if r == nil || b.OwnerID != g.ownerID {
		g.mu.Unlock()
		return fmt.Errorf("release region %d: %w", b.Region, ErrReleased)
	}
	if !r.key.Equal(b.Key) {
		g.mu.Unlock()
		return fmt.Errorf("release region %d: %w", b.Region, ErrBadKey)
	}
	delete(g.regions, r.id)
	g.mu.Unlock()
	return g.finish(ctx, r)
}

func (g *Registry) finish(ctx context.Context, r *Region) error {
	r.markReleased()
	g.cut(r)
	select {
	case <-r.drained: // already drained: succeed even if ctx is done
		g.free(r)
		return nil
	default:
	}
	select {
	case <-r.drained:
		g.free(r)
		return nil
	case <-ctx.Done():
		go func() { <-r.drained; g.free(r) }() // freed once drained; owned by the region's references
		return fmt.Errorf("release region %d: %w", r.id, ctx.Err())
	}
}

func (g *Registry) free(r *Region) {
	g.mu.RLock()
	hooks := g.hooks
	g.mu.RUnlock()
	for _, h := range hooks {
		_ = h.DeregisterRegion(r)
	}
	switch r.kind {
	case KindAllocated:
		_ = munmap(r.mapping)
	case KindUser:
		r.pinner.Unpin()
	}
	g.unreserve(uint64(len(r.mem)))
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
	return Stats{Regions: len(g.regions), Bytes: g.bytes}
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
	regs := make([]*Region, 0, len(g.regions))
	for id, r := range g.regions {
		regs = append(regs, r)
		delete(g.regions, id)
	}
	g.mu.Unlock()
	var first error
	for _, r := range regs {
		if err := g.finish(ctx, r); err != nil && first == nil {
			first = err
		}
	}
	return first
}
