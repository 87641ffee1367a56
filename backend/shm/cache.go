//go:build linux

package shm

import (
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/refgate"
)

// entry is a remote region a route mapped (or learnt it cannot map).
type entry struct {
	id       uint64
	key      buffer.Key
	slot     uint32
	access   buffer.Access
	mem      []byte // the region's bytes in our mapping of its memfd
	m        *mapping
	dev      *devMap // a device region opened through CUDA IPC (device.go)
	fallback bool    // not memfd-backed: its operations go to the fallback

	// refs counts the cache's reference (until it drops the entry) and one
	// per copy using it; the last one lets the mapping go and leaves the
	// route's gate (an entry is one user of it from install on: the route
	// unmaps its state table only once every entry is gone). Once zero it
	// stays zero (tryRef).
	refs atomic.Int32
}

// tryRef takes a reference to e unless its last one is gone.
func (e *entry) tryRef() bool {
	for {
		n := e.refs.Load()
		if n <= 0 {
			return false
		}
		if e.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// mapping is one memfd mapped (the regions of one slab share it).
type mapping struct {
	id   fileID
	mem  []byte
	refs int     // entries using it; guarded by mapCache.mu
	pin  hostPin // its registration with a CUDA driver (devpin.go: the copier makes it, release undoes it)
}

// hotSize is the number of entries a cache finds without its lock: slot
// id%hotSize holds the last one found there.
const hotSize = 64

// mapCache is a route's mapped regions, bounded (oldest mapped dropped
// first). The data path finds an entry in hot with one load and one
// compare-and-swap (its reference); a miss takes the lock and the map.
type mapCache struct {
	max  int
	gate *refgate.Gate // the route's: each entry is one user of it
	hot  [hotSize]atomic.Pointer[entry]
	// pinned counts the bytes of the mappings registered with the CUDA
	// driver (devpin.go), against pinBudget.
	pinned atomic.Int64

	mu      sync.RWMutex // guards the fields below
	entries map[uint64]*entry
	order   []uint64 // region ids in the order mapped (may hold dropped ones)
	maps    map[fileID]*mapping
	// proxied counts the open proxy gates of each region (proxy.go): its
	// entry is never evicted (the owner would cut the region under the
	// agent), whichever entry of the region the gates came from.
	proxied map[uint64]int
	closed  bool
}

func newMapCache(max int, gate *refgate.Gate) *mapCache {
	return &mapCache{max: max, gate: gate, entries: make(map[uint64]*entry), maps: make(map[fileID]*mapping), proxied: make(map[uint64]int)}
}

// get returns the entry of region id under key with a reference (unref
// it), or nil. The key is the caller's own handle's: no secret to time.
func (c *mapCache) get(id uint64, key buffer.Key) *entry {
	h := &c.hot[id%hotSize]
	if e := h.Load(); e != nil && e.id == id && e.key == key && e.tryRef() {
		return e
	}
	c.mu.RLock()
	e := c.entries[id]
	if e == nil || e.key != key || !e.tryRef() {
		c.mu.RUnlock()
		return nil
	}
	h.Store(e) // under the read lock: dropLocked (write lock) clears it after
	c.mu.RUnlock()
	return e
}

// unref drops a reference to e.
func (c *mapCache) unref(e *entry) {
	if e.refs.Add(-1) == 0 {
		c.mu.Lock()
		c.gone(e)
		c.mu.Unlock()
	}
}

// gone lets e's mapping go once its last reference is; c.mu is held.
func (c *mapCache) gone(e *entry) {
	if e.m != nil {
		c.release(e.m)
	}
	if e.dev != nil {
		e.closeDevice()
	}
	c.gate.Leave()
}

// release drops an entry's use of m; c.mu is held.
func (c *mapCache) release(m *mapping) {
	if m.refs--; m.refs == 0 {
		delete(c.maps, m.id)
		m.unpin(c)
		unix.Munmap(m.mem)
	}
}

// install adds e (refs 0: install counts the cache's) and returns the
// entries evicted to stay within max (tell the owner), already dropped.
// With a fd, the region's memfd is mapped (once per file) and fd closed.
func (c *mapCache) install(e *entry, fd int, off, n uint64) (evicted []*entry, err error) {
	if fd >= 0 {
		defer unix.Close(fd)
	}
	var fresh []byte
	var fid fileID
	if fd >= 0 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, err
		}
		fid = fileID{dev: st.Dev, ino: st.Ino}
		c.mu.RLock()
		_, have := c.maps[fid]
		c.mu.RUnlock()
		if !have {
			if fresh, fid, err = mapShared(fd); err != nil {
				return nil, err
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if fd >= 0 {
		m := c.maps[fid]
		if m == nil {
			m = &mapping{id: fid, mem: fresh}
			c.maps[fid] = m
		} else if fresh != nil {
			unix.Munmap(fresh) // mapped meanwhile by another install
		}
		if off > uint64(len(m.mem)) || n > uint64(len(m.mem))-off {
			if m.refs == 0 {
				delete(c.maps, fid)
				unix.Munmap(m.mem)
			}
			return nil, errBadPlace
		}
		m.refs++
		e.m, e.mem = m, m.mem[off:off+n:off+n]
	}
	if c.closed || !c.gate.Enter() {
		if e.m != nil {
			c.release(e.m)
		}
		return nil, errRouteClosed
	}
	e.refs.Store(1)
	if old := c.entries[e.id]; old != nil {
		c.dropLocked(old)
	}
	c.entries[e.id] = e
	c.order = append(c.order, e.id)
	for tries := len(c.order); len(c.entries) > c.max && tries > 0; tries-- {
		id := c.order[0]
		c.order = c.order[1:]
		old := c.entries[id]
		switch {
		case old == nil || old == e: // dropped before; e is listed last
		case c.proxied[id] > 0: // kept: to the back of the line
			c.order = append(c.order, id)
		default:
			c.dropLocked(old)
			evicted = append(evicted, old)
		}
	}
	if len(c.order) > 4*c.max { // compact: each listed id once, at its last place
		seen := make(map[uint64]bool, len(c.entries))
		keep := make([]uint64, 0, len(c.entries))
		for i := len(c.order) - 1; i >= 0; i-- {
			if id := c.order[i]; c.entries[id] != nil && !seen[id] {
				seen[id] = true
				keep = append(keep, id)
			}
		}
		slices.Reverse(keep)
		c.order = keep
	}
	return evicted, nil
}

// drop removes e if it is still listed; it reports whether it was.
func (c *mapCache) drop(e *entry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries[e.id] != e {
		return false
	}
	c.dropLocked(e)
	return true
}

// dropID removes the entry of region id in slot (the owner's msgGone).
func (c *mapCache) dropID(id uint64, slot uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[id]; e != nil && e.slot == slot && !e.fallback {
		c.dropLocked(e)
	}
}

// dropLocked unlists e and drops the cache's reference; c.mu is held.
func (c *mapCache) dropLocked(e *entry) {
	delete(c.entries, e.id)
	c.hot[e.id%hotSize].CompareAndSwap(e, nil)
	if e.refs.Add(-1) == 0 {
		c.gone(e)
	}
}

// close drops every entry; mappings go as their last copy ends (and with
// the last of them the route's gate drains).
func (c *mapCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, e := range c.entries {
		c.dropLocked(e)
	}
	c.order = nil
}
