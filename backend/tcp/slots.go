package tcp

import "sync/atomic"

// slotTable is a connection's table of chunks in flight, indexed by slot
// (under clientConn.mu). A chunk's wire id is its slot in the low 32 bits
// and the slot's generation in the high 32: the generation moves on each
// time the slot is freed, so an answer naming a slot that was freed (and
// perhaps taken again) finds nothing, exactly as an id never handed out
// does, and never completes another operation. Free slots are reused last
// in, first out, so a steady pipeline touches the same few entries.
type slotTable struct {
	chunks []*chunk // by slot; nil when free
	gens   []uint32 // the slot's current generation, never 0
	free   []uint32 // free slots, a stack
	// held is the slots in use: written under clientConn.mu, read
	// without it by PostList (a connection's load: listBatch.start).
	held atomic.Int32
	// wire is the bytes of the frames written and not yet answered
	// (chunk.wire of each chunk held): what the socket buffers can hold
	// at most.
	wire int
}

// put takes a slot for c and returns c's wire id.
func (t *slotTable) put(c *chunk) uint64 {
	if len(t.free) == 0 {
		t.free = append(t.free, uint32(len(t.chunks)))
		t.chunks = append(t.chunks, nil)
		t.gens = append(t.gens, 1)
	}
	s := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	t.chunks[s] = c
	t.held.Add(1)
	return uint64(t.gens[s])<<32 | uint64(s)
}

// get returns the chunk that holds id, or nil when id is not held now
// (never handed out, or its slot freed since).
func (t *slotTable) get(id uint64) *chunk {
	s := uint32(id)
	if uint64(s) >= uint64(len(t.chunks)) || t.gens[s] != uint32(id>>32) {
		return nil
	}
	return t.chunks[s]
}

// del frees id's slot; an id not held is ignored.
func (t *slotTable) del(id uint64) {
	s := uint32(id)
	if t.get(id) == nil {
		return
	}
	t.wire -= t.chunks[s].wire
	t.chunks[s].wire = 0
	t.chunks[s] = nil
	t.gens[s]++
	if t.gens[s] == 0 { // wrapped: 0 is never a generation
		t.gens[s] = 1
	}
	t.free = append(t.free, s)
	t.held.Add(-1)
}
