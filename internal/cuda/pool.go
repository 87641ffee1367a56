package cuda

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/rdmamgr/rdmamgr"
)

// Size classes of pooled device memory: powers of two from 4 KiB to
// 1 MiB, carved out of 2 MiB slabs (one MemAlloc each). cuMemAlloc costs
// microseconds and rounds to 2 MiB on its own, so small buffers share
// slabs; above 1 MiB a buffer's own allocation wastes little.
const (
	minPoolShift = 12 // 4 KiB
	maxPoolShift = 20 // 1 MiB
	numPoolClass = maxPoolShift - minPoolShift + 1

	// MaxPooled is the largest Alloc served from a slab.
	MaxPooled = 1 << maxPoolShift
	// PoolSlab is the size of one slab.
	PoolSlab = 2 << 20
	// poolSpares is how many empty slabs a Pool keeps (zeroed, for any
	// class): cuMemFree synchronizes the whole device, so allocating and
	// freeing in a loop must not free a slab each time.
	poolSpares = 2
)

// Block is device memory from a Pool: Ptr, Size bytes (as asked). Give it
// back with Pool.Free exactly once.
type Block struct {
	Ptr  DevicePtr
	Size uint64
	slab *poolSlab // nil: an allocation of its own
}

// Own reports whether the block is an allocation of its own (not a slot
// of a slab): only such a block may be exported through IPC, since a
// handle names the whole allocation it is in.
func (b Block) Own() bool { return b.slab == nil }

type poolSlab struct {
	base  DevicePtr
	class int
	used  int
}

// PoolStats counts a Pool's memory.
type PoolStats struct {
	Slabs  int // slabs carved into slots
	Spares int // empty slabs kept
	InUse  int // blocks handed out and not freed
	Own    int // of which allocations of their own
	Zeroed int // slots zeroed on Free
}

// Pool pools one device's memory in size classes over any Driver. Slots
// are zeroed on Free (on the pool's own stream, waited for), so a new
// block never shows a previous owner's bytes; a block of its own is freed
// at once, never reused (a process that opened it through IPC might still
// hold it). Safe for concurrent use.
type Pool struct {
	d   Driver
	ctx Context

	mu     sync.Mutex // guards the fields below
	stream Stream     // made on first use, for zeroing
	free   [numPoolClass][]DevicePtr
	slotOf map[DevicePtr]*poolSlab // every free slot's slab
	slabs  map[*poolSlab]bool
	spares []DevicePtr // empty zeroed slabs
	stats  PoolStats
	closed bool
}

// NewPool returns an empty pool allocating in ctx; it does no driver call.
func NewPool(d Driver, ctx Context) *Pool {
	return &Pool{d: d, ctx: ctx, slotOf: make(map[DevicePtr]*poolSlab), slabs: make(map[*poolSlab]bool)}
}

func poolClass(size uint64) (int, bool) {
	if size > MaxPooled {
		return 0, false
	}
	return max(bits.Len64(size-1), minPoolShift) - minPoolShift, true
}

// Alloc returns size bytes of zeroed device memory. own asks for an
// allocation of its own (one that will be exported through IPC); sizes
// over MaxPooled always get one. Fails with rdmamgr.ErrInvalid for size 0,
// rdmamgr.ErrClosed after Close, or the driver's error (ErrOutOfMemory).
func (p *Pool) Alloc(size uint64, own bool) (Block, error) {
	if size == 0 {
		return Block{}, fmt.Errorf("cuda: pool: zero size: %w", rdmamgr.ErrInvalid)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Block{}, fmt.Errorf("cuda: pool: %w", rdmamgr.ErrClosed)
	}
	class, ok := poolClass(size)
	if own || !ok {
		ptr, err := p.d.MemAlloc(p.ctx, size)
		if err != nil {
			return Block{}, err
		}
		if err := p.zeroLocked(ptr, size); err != nil {
			p.d.MemFree(p.ctx, ptr)
			return Block{}, err
		}
		p.stats.InUse++
		p.stats.Own++
		return Block{Ptr: ptr, Size: size}, nil
	}
	if len(p.free[class]) == 0 {
		base, err := p.slabLocked()
		if err != nil {
			return Block{}, err
		}
		s := &poolSlab{base: base, class: class}
		p.slabs[s] = true
		p.stats.Slabs++
		slot := uint64(1) << (class + minPoolShift)
		for off := PoolSlab - slot; ; off -= slot { // hand out low addresses first
			ptr := base + DevicePtr(off)
			p.free[class] = append(p.free[class], ptr)
			p.slotOf[ptr] = s
			if off == 0 {
				break
			}
		}
	}
	n := len(p.free[class]) - 1
	ptr := p.free[class][n]
	p.free[class] = p.free[class][:n]
	s := p.slotOf[ptr]
	delete(p.slotOf, ptr)
	s.used++
	p.stats.InUse++
	return Block{Ptr: ptr, Size: size, slab: s}, nil
}

// slabLocked returns a zeroed slab: a spare, or a new allocation.
func (p *Pool) slabLocked() (DevicePtr, error) {
	if n := len(p.spares); n > 0 {
		base := p.spares[n-1]
		p.spares = p.spares[:n-1]
		p.stats.Spares--
		return base, nil
	}
	base, err := p.d.MemAlloc(p.ctx, PoolSlab)
	if err != nil {
		return 0, err
	}
	if err := p.zeroLocked(base, PoolSlab); err != nil {
		p.d.MemFree(p.ctx, base)
		return 0, err
	}
	return base, nil
}

// zeroLocked sets [ptr, ptr+n) to zero and waits.
func (p *Pool) zeroLocked(ptr DevicePtr, n uint64) error {
	if p.stream == 0 {
		s, err := p.d.StreamCreate(p.ctx)
		if err != nil {
			return err
		}
		p.stream = s
	}
	if err := p.d.MemsetAsync(p.ctx, ptr, 0, n, p.stream); err != nil {
		return err
	}
	return p.d.StreamSynchronize(p.ctx, p.stream)
}

// Free gives b back: a slot is zeroed and reused, an allocation of its
// own is freed. The caller must have finished every copy touching b.
// A slab whose last slot comes back is kept as a spare (poolSpares at
// most) or freed. After Close it does nothing.
func (p *Pool) Free(b Block) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if b.slab == nil {
		if err := p.d.MemFree(p.ctx, b.Ptr); err != nil {
			return err
		}
		p.stats.InUse--
		p.stats.Own--
		return nil
	}
	s := b.slab
	slot := uint64(1) << (s.class + minPoolShift)
	if !p.slabs[s] || b.Ptr < s.base || uint64(b.Ptr-s.base) >= PoolSlab || uint64(b.Ptr-s.base)%slot != 0 || p.slotOf[b.Ptr] != nil {
		return fmt.Errorf("cuda: pool: block %#x not handed out: %w", b.Ptr, rdmamgr.ErrInvalid)
	}
	p.stats.InUse--
	s.used--
	err := p.zeroLocked(b.Ptr, slot)
	if s.used == 0 {
		p.dropSlabLocked(s)
		if err == nil && len(p.spares) < poolSpares {
			p.spares = append(p.spares, s.base)
			p.stats.Spares++
			return nil
		}
		return errors.Join(err, p.d.MemFree(p.ctx, s.base))
	}
	if err != nil {
		// Not known to be zero: never hand it out again.
		return err
	}
	p.stats.Zeroed++
	p.free[s.class] = append(p.free[s.class], b.Ptr)
	p.slotOf[b.Ptr] = s
	return nil
}

// dropSlabLocked forgets s and its free slots.
func (p *Pool) dropSlabLocked(s *poolSlab) {
	free := p.free[s.class][:0]
	for _, ptr := range p.free[s.class] {
		if p.slotOf[ptr] == s {
			delete(p.slotOf, ptr)
		} else {
			free = append(free, ptr)
		}
	}
	p.free[s.class] = free
	delete(p.slabs, s)
	p.stats.Slabs--
}

// Stats returns the pool's counters now.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close frees every slab and the pool's stream; blocks still out become
// invalid (their own allocations are the caller's to have freed first).
// Idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var first error
	for s := range p.slabs {
		if err := p.d.MemFree(p.ctx, s.base); err != nil && first == nil {
			first = err
		}
	}
	for _, base := range p.spares {
		if err := p.d.MemFree(p.ctx, base); err != nil && first == nil {
			first = err
		}
	}
	p.slabs, p.slotOf, p.spares = nil, nil, nil
	if p.stream != 0 {
		if err := p.d.StreamDestroy(p.ctx, p.stream); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Driver returns the driver the pool allocates through.
func (p *Pool) Driver() Driver { return p.d }
