package memreg

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// KindDevice: CUDA device memory from the registry's device pools
// (AllocateAt with a device Location).
const KindDevice Kind = KindProxy + 1

// DeviceSpan is device memory a Ref or a Region reaches: Len bytes at
// Ptr on device Dev, in context Ctx of Driver. Valid while the Ref is
// held (or the region registered, for Region.Device).
type DeviceSpan struct {
	Driver cuda.Driver
	Ctx    cuda.Context
	Dev    int
	Ptr    cuda.DevicePtr
	Len    uint64
}

// deviceMem is the device memory of a KindDevice region.
type deviceMem struct {
	pool  *devicePool
	block cuda.Block
}

// devicePool is one device's pooled allocator, in its primary context.
type devicePool struct {
	dev  int
	ctx  cuda.Context
	pool *cuda.Pool
}

// devices is a registry's device memory: the driver and a pool per
// device, made on first use.
type devices struct {
	mu     sync.Mutex
	d      cuda.Driver
	why    error // why there is no driver (nil d)
	pools  map[int]*devicePool
	live   int  // device regions not yet freed
	closed bool // the registry closed: pools go once live is 0
}

// SetCUDA gives the registry the CUDA driver its device regions are
// allocated through; d nil means there is none, and why (may be nil)
// says why: a device request then fails with rdmamgr.ErrNotSupported
// naming it. Call it before the first device allocation. The registry
// never closes d; it releases the primary contexts it retained when it
// closes and its last device region is freed.
func (g *Registry) SetCUDA(d cuda.Driver, why error) {
	g.dev.mu.Lock()
	defer g.dev.mu.Unlock()
	g.dev.d, g.dev.why = d, why
}

// AllocateAt is Allocate of memory at loc: buffer.Host is Allocate; a
// CUDA device's memory comes from that device's pool (cuda.Pool: slots of
// 2 MiB slabs up to 1 MiB, zeroed before reuse; larger sizes an
// allocation of their own). A device region keeps every rule of a region
// (id, key, access, bounds, lease, revocation, Release waiting for its
// Refs, Limits) but has no host bytes: AcquireRemote, AcquireLocal and
// Bytes refuse it with ErrNotSupported, and only a data path that moves
// device memory reaches it (AcquireRemoteAny, AcquireLocalAny). Of the
// backend Hooks only DeviceHooks see it (device_hooks.go: ibverbs through
// dma-buf); its handle has an RDMA key only if one of them registered it.
// Without a driver
// (SetCUDA) it fails with ErrNotSupported saying why.
func (g *Registry) AllocateAt(loc buffer.Location, size uint64, access buffer.Access) (buffer.Buffer, error) {
	dev, ok := loc.Device()
	if !ok {
		if loc != buffer.Host {
			return buffer.Buffer{}, fmt.Errorf("allocate at %v: %w", loc, rdmamgr.ErrInvalid)
		}
		return g.Allocate(size, access)
	}
	if size == 0 {
		return buffer.Buffer{}, fmt.Errorf("allocate 0 bytes: %w", rdmamgr.ErrInvalid)
	}
	if !access.Valid() {
		return buffer.Buffer{}, fmt.Errorf("allocate with access %#x: %w", uint32(access), rdmamgr.ErrInvalid)
	}
	if size > 1<<46 {
		return buffer.Buffer{}, fmt.Errorf("allocate %d bytes: %w", size, rdmamgr.ErrLimit)
	}
	p, err := g.dev.pool(dev)
	if err != nil {
		return buffer.Buffer{}, fmt.Errorf("allocate %d bytes at %v: %w", size, loc, err)
	}
	if err := g.reserve(size); err != nil {
		g.dev.put()
		return buffer.Buffer{}, err
	}
	blk, err := p.pool.Alloc(size, false)
	if err != nil {
		g.unreserve(size)
		g.dev.put()
		return buffer.Buffer{}, fmt.Errorf("allocate %d bytes at %v: %w", size, loc, err)
	}
	r, err := g.add(&Region{kind: KindDevice, size: size, access: access, fd: -1, dev: &deviceMem{pool: p, block: blk}})
	if err != nil {
		_ = p.pool.Free(blk)
		g.unreserve(size)
		g.dev.put()
		return buffer.Buffer{}, err
	}
	return g.handle(r), nil
}

// pool returns device dev's pool, made on first use, and counts one more
// live device region (put undoes it).
func (ds *devices) pool(dev int) (*devicePool, error) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	switch {
	case ds.closed:
		return nil, rdmamgr.ErrClosed
	case ds.d == nil && ds.why != nil:
		return nil, fmt.Errorf("no CUDA driver: %w: %w", ds.why, rdmamgr.ErrNotSupported)
	case ds.d == nil:
		return nil, fmt.Errorf("no CUDA driver configured (node.Config.CUDA): %w", rdmamgr.ErrNotSupported)
	}
	if p := ds.pools[dev]; p != nil {
		ds.live++
		return p, nil
	}
	n, err := ds.d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if dev >= n {
		return nil, fmt.Errorf("device %d of %d: %w", dev, n, rdmamgr.ErrNotSupported)
	}
	ctx, err := ds.d.PrimaryContext(dev)
	if err != nil {
		return nil, err
	}
	p := &devicePool{dev: dev, ctx: ctx, pool: cuda.NewPool(ds.d, ctx)}
	if ds.pools == nil {
		ds.pools = make(map[int]*devicePool)
	}
	ds.pools[dev] = p
	ds.live++
	return p, nil
}

// put counts a device region freed (or one never made); the last one
// after the registry closed closes the pools.
func (ds *devices) put() {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	ds.live--
	ds.closeIdleLocked()
}

// close marks the registry closed; the pools close now if no device
// region is left, else when the last one is freed.
func (ds *devices) close() {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	ds.closed = true
	ds.closeIdleLocked()
}

func (ds *devices) closeIdleLocked() {
	if !ds.closed || ds.live > 0 {
		return
	}
	for dev, p := range ds.pools {
		_ = p.pool.Close()
		_ = ds.d.ReleasePrimaryContext(dev)
		delete(ds.pools, dev)
	}
}

// freeDevice gives a freed device region's memory back to its pool (a
// slot is zeroed there before reuse).
func (g *Registry) freeDevice(r *Region) {
	if err := r.dev.pool.pool.Free(r.dev.block); err != nil && !errors.Is(err, rdmamgr.ErrClosed) {
		r.Quarantine() // not known to be free: the pool keeps it out of use (Free's contract)
	}
	g.dev.put()
}

// Device returns the device memory of a KindDevice region (ok false for
// host memory). Valid while the caller holds a Ref on the region.
func (r *Region) Device() (DeviceSpan, bool) {
	if r.dev == nil {
		return DeviceSpan{}, false
	}
	p := r.dev.pool
	return DeviceSpan{Driver: p.pool.Driver(), Ctx: p.ctx, Dev: p.dev, Ptr: r.dev.block.Ptr, Len: r.size}, true
}

// Location returns where the region's memory is.
func (r *Region) Location() buffer.Location {
	if r.dev == nil {
		return buffer.Host
	}
	return buffer.CUDA(r.dev.pool.dev)
}

// Device returns the device memory the Ref reaches: ok false for host
// memory (then Bytes is it).
func (f Ref) Device() (DeviceSpan, bool) {
	if f.r == nil || f.r.dev == nil {
		return DeviceSpan{}, false
	}
	s, _ := f.r.Device()
	s.Ptr += cuda.DevicePtr(f.off)
	s.Len = f.n
	return s, true
}

// Len returns the length of the referenced memory (host or device).
func (f Ref) Len() uint64 { return f.n }

// errDevice is the refusal of a device region by a path that moves host
// memory only.
var errDevice = fmt.Errorf("device memory on a path that moves host memory only: %w", rdmamgr.ErrNotSupported)
