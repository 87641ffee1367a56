//go:build ibverbs

package ibverbs

import (
	"sync"
)

// slotTable maps work-request ids to chunks: C never holds Go pointers.
// An id is the slot index in the low 32 bits and the slot's generation in
// the 31 bits above, so a stale completion never matches a reused slot (the
// top bit is never set: it marks control work, see ring.go).
type slotTable struct {
	mu      sync.Mutex
	entries []slotEntry
	free    []uint32
}

const genMask = 1<<31 - 1

type slotEntry struct {
	gen uint32
	c   *chunk
}

func (t *slotTable) alloc(c *chunk) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var i uint32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		i = uint32(len(t.entries))
		t.entries = append(t.entries, slotEntry{})
	}
	e := &t.entries[i]
	e.c = c
	return uint64(e.gen)<<32 | uint64(i)
}

// busy reports whether any work request is outstanding.
func (t *slotTable) busy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries) > len(t.free)
}

// take frees the slot of id and returns its chunk (nil if stale).
func (t *slotTable) take(id uint64) *chunk {
	i, gen := uint32(id), uint32(id>>32)
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(i) >= len(t.entries) {
		return nil
	}
	e := &t.entries[i]
	if e.c == nil || e.gen != gen {
		return nil
	}
	c := e.c
	e.c = nil
	e.gen = (e.gen + 1) & genMask
	t.free = append(t.free, i)
	return c
}

// takeRoute frees every slot of r and returns their chunks.
func (t *slotTable) takeRoute(r *route) []*chunk {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*chunk
	for i := range t.entries {
		e := &t.entries[i]
		if e.c != nil && e.c.r == r {
			out = append(out, e.c)
			e.c = nil
			e.gen = (e.gen + 1) & genMask
			t.free = append(t.free, uint32(i))
		}
	}
	return out
}
