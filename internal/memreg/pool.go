package memreg

import (
	"container/heap"
	"errors"
	"math/bits"
	"sync"

	"github.com/rdmamgr/rdmamgr"
)

// Size classes of pooled allocation: powers of two from 4 KiB to 64 KiB.
//
//   - A page at least: a slot never shares a page with another; it is
//     also a whole number of cache lines (no false sharing between
//     owners) and 8-byte atomics are always aligned. (A slot is never
//     exported to another process: a registry that exports gives readable
//     regions a memfd of their own, SetExporting.) A buffer smaller than a page costs a page
//     of slab memory, never more of the caller's limits.
//   - Powers of two: a slot wastes less than half of itself (a quarter on
//     average); the waste costs slab memory only, never the caller's limits.
//   - 64 KiB at most: above it a buffer's own memfd and mapping cost little
//     beside the data it holds, zeroing a slot on reuse would cost as much as
//     the fresh pages the kernel gives, and a 1 MiB slab still holds 16 slots.
const (
	minClassShift = 12 // 4 KiB
	maxClassShift = 16 // 64 KiB
	numClasses    = maxClassShift - minClassShift + 1

	// MaxPooled is the largest Allocate served from a slab.
	MaxPooled = 1 << maxClassShift
	// SlabSize is the size of one slab: one memfd and one mapping, carved
	// into equal slots of one class (16 to 256 slots).
	SlabSize = 1 << 20
)

// errPoolFull: the slab cap is reached; Allocate maps the buffer on its own.
var errPoolFull = errors.New("memreg: slab memory cap reached")

// classOf returns the size class of an allocation of size bytes (size > 0),
// and false when it is too large to pool.
func classOf(size uint64) (int, bool) {
	if size > MaxPooled {
		return 0, false
	}
	shift := max(bits.Len64(size-1), minClassShift)
	return shift - minClassShift, true
}

// Slab is one memfd mapping carved into the slots of one size class. A
// slab lives while any of its regions does (and, empty, while the pool
// keeps it as a spare).
type Slab struct {
	id    uint64
	fd    int
	mem   []byte // the whole mapping, SlabSize bytes
	class int
	slot  uint64 // slot size

	// Guarded by pool.mu.
	used int      // slots handed out
	bump int      // slots [bump, SlabSize/slot) were never handed out
	free []uint32 // slots given back, already zeroed
	idx  int      // index in the class's heap of slabs with a free slot; -1 when not in it
}

// ID returns the slab id (unique in its registry, never reused).
func (s *Slab) ID() uint64 { return s.id }

// Mem returns the whole slab; an RDMA backend registers it once for local
// access.
func (s *Slab) Mem() []byte { return s.mem }

func (s *Slab) full() bool { return s.used == int(SlabSize/s.slot) }

// take hands out a slot and returns its offset; the slab is not full.
func (s *Slab) take() uint64 {
	s.used++
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return uint64(i) * s.slot
	}
	s.bump++
	return uint64(s.bump-1) * s.slot
}

// SlabHooks is implemented by hooks that keep state per slab (an RDMA
// backend's local memory region over the whole slab, made when the slab's
// first region is registered). DeregisterSlab runs once the slab's last
// region was deregistered, before its memory is unmapped.
type SlabHooks interface {
	DeregisterSlab(s *Slab) error
}

// maxSpareSlabs is how many empty slabs the pool keeps mapped for reuse,
// for any class: enough that a loop allocating and releasing buffers maps
// nothing, few enough that an idle manager holds 2 MiB and two fds more
// than it did before its first buffer.
const maxSpareSlabs = 2

// pool hands out slots of slabs by size class. Empty slabs are unmapped at
// once, except maxSpareSlabs spares; a spare is carved anew for whichever
// class next needs a slab (it is all zeros).
type pool struct {
	mu       sync.Mutex           // guards the fields below and the slabs' free lists
	classes  [numClasses]slabHeap // slabs with a free slot, lowest id first (fills old slabs, lets new ones empty)
	spares   []*Slab              // empty slabs kept for reuse, in no heap
	nextID   uint64
	slabs    int
	maxBytes uint64 // cap on slab memory (0: none)
	closed   bool
}

// get hands out a slot of class c: its slab and offset. It maps a new slab
// when the class has no free slot, or fails with errPoolFull at the cap.
func (p *pool) get(c int) (*Slab, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, 0, rdmamgr.ErrClosed
	}
	avail := &p.classes[c]
	switch {
	case len(*avail) > 0:
	case len(p.spares) > 0:
		s := p.spares[len(p.spares)-1]
		p.spares = p.spares[:len(p.spares)-1]
		s.class, s.slot, s.bump, s.free = c, 1<<(c+minClassShift), 0, s.free[:0]
		heap.Push(avail, s)
	default:
		if p.maxBytes > 0 && uint64(p.slabs+1)*SlabSize > p.maxBytes {
			return nil, 0, errPoolFull
		}
		fd, mem, err := memfdMap("rdmamgr-slab", SlabSize)
		if err != nil {
			return nil, 0, err
		}
		p.nextID++
		p.slabs++
		heap.Push(avail, &Slab{id: p.nextID, fd: fd, mem: mem, class: c, slot: 1 << (c + minClassShift)})
	}
	s := (*avail)[0]
	off := s.take()
	if s.full() {
		heap.Remove(avail, s.idx)
	}
	return s, off, nil
}

// put gives back the slot at off of s, zeroed by the caller. It returns s
// when the slab is empty and must be unmapped (after DeregisterSlab).
func (p *pool) put(s *Slab, off uint64) *Slab {
	p.mu.Lock()
	defer p.mu.Unlock()
	avail := &p.classes[s.class]
	if s.full() {
		heap.Push(avail, s)
	}
	s.used--
	s.free = append(s.free, uint32(off/s.slot))
	if s.used > 0 {
		return nil
	}
	heap.Remove(avail, s.idx)
	if len(p.spares) < maxSpareSlabs && !p.closed {
		p.spares = append(p.spares, s)
		return nil
	}
	p.slabs--
	return s
}

// close stops handing out slots and returns the spare slabs to unmap; the
// slabs still in use are returned by put as they empty.
func (p *pool) close() []*Slab {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	out := p.spares
	p.spares = nil
	p.slabs -= len(out)
	return out
}

// stats returns the slabs mapped.
func (p *pool) stats() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.slabs
}

// slabHeap orders slabs by id (container/heap).
type slabHeap []*Slab

func (h slabHeap) Len() int           { return len(h) }
func (h slabHeap) Less(i, j int) bool { return h[i].id < h[j].id }
func (h slabHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *slabHeap) Push(x any) {
	s := x.(*Slab)
	s.idx = len(*h)
	*h = append(*h, s)
}
func (h *slabHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.idx = -1
	return s
}
