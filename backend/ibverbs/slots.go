//go:build ibverbs

package ibverbs

import (
	"sync"

	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
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
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.takeLocked(id)
}

func (t *slotTable) takeLocked(id uint64) *chunk {
	i, gen := uint32(id), uint32(id>>32)
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

// opTable holds a route's ops posted and not reported, indexed by
// op.idx (no map per operation): Cancel and the watchdog scan it, at most
// MaxInFlight entries.
type opTable struct {
	mu   sync.Mutex
	ops  []*op
	free []int32
}

func (t *opTable) init(n int) {
	t.ops = make([]*op, 0, n)
	t.free = make([]int32, 0, n)
}

// add enters ops, under one lock. An op whose request was cancelled while
// it was being posted is marked cancelled here: whichever of this and
// Cancel's scan (each, under the same lock) comes second marks it, so no
// cancel is lost and none is carried out late, after the post, when the
// request may have completed and been posted again (its next post's op
// would be marked).
func (t *opTable) add(ops []*op) {
	t.mu.Lock()
	for _, o := range ops {
		if n := len(t.free); n > 0 {
			o.idx = t.free[n-1]
			t.free = t.free[:n-1]
			t.ops[o.idx] = o
		} else {
			o.idx = int32(len(t.ops))
			t.ops = append(t.ops, o)
		}
		if cause := o.wr.CancelCause(); cause != nil {
			err := routestate.OpError("ibverbs", o.wr, cause)
			o.canceled.CompareAndSwap(nil, &err)
		}
	}
	t.mu.Unlock()
}

// remove takes o out (it must be in).
func (t *opTable) remove(o *op) {
	t.mu.Lock()
	if t.ops[o.idx] == o {
		t.ops[o.idx] = nil
		t.free = append(t.free, o.idx)
	}
	t.mu.Unlock()
}

// each calls f on every op in the table, under its lock.
func (t *opTable) each(f func(*op)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, o := range t.ops {
		if o != nil {
			f(o)
		}
	}
}

// takeBatch frees the slots of the first n completions of buf that are
// not control work, under one lock, and appends their chunks with their
// statuses to ds (a stale id is logged and skipped).
func (t *slotTable) takeBatch(buf wcBuf, n int, ds []done) []done {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range n {
		w := &buf[i]
		id := uint64(w.wr_id)
		if id&ctlBit != 0 {
			continue
		}
		if c := t.takeLocked(id); c != nil {
			ds = append(ds, done{c: c, status: uint32(w.status), vendor: uint32(w.vendor_err)})
		}
	}
	return ds
}
