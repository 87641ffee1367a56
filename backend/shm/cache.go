//go:build linux

package shm

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// entry is a remote region a route mapped (or learnt it cannot map).
type entry struct {
	id       uint64
	key      buffer.Key
	slot     uint32
	access   buffer.Access
	mem      []byte // the region's bytes in our mapping of its memfd
	m        *mapping
	fallback bool // not memfd-backed: its operations go to the fallback

	// refs counts the cache's reference (until it drops the entry) and one
	// per copy using it; the last one lets the mapping go.
	refs atomic.Int32
}

// mapping is one memfd mapped (the regions of one slab share it).
type mapping struct {
	id   fileID
	mem  []byte
	refs int // entries using it; guarded by mapCache.mu
}

// mapCache is a route's mapped regions, bounded (oldest mapped dropped
// first).
type mapCache struct {
	max int

	mu      sync.RWMutex // guards the fields below
	entries map[uint64]*entry
	order   []uint64 // region ids in the order mapped (may hold dropped ones)
	maps    map[fileID]*mapping
	closed  bool
}

func newMapCache(max int) *mapCache {
	return &mapCache{max: max, entries: make(map[uint64]*entry), maps: make(map[fileID]*mapping)}
}

// get returns the entry of region id under key with a reference (unref
// it), or nil.
func (c *mapCache) get(id uint64, key buffer.Key) *entry {
	c.mu.RLock()
	e := c.entries[id]
	if e == nil || e.key != key { // the caller's own handle: no secret to time
		c.mu.RUnlock()
		return nil
	}
	e.refs.Add(1)
	c.mu.RUnlock()
	return e
}

// unref drops a reference to e.
func (c *mapCache) unref(e *entry) {
	if e.refs.Add(-1) == 0 && e.m != nil {
		c.mu.Lock()
		c.release(e.m)
		c.mu.Unlock()
	}
}

// release drops an entry's use of m; c.mu is held.
func (c *mapCache) release(m *mapping) {
	if m.refs--; m.refs == 0 {
		delete(c.maps, m.id)
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
	if c.closed {
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
	for len(c.entries) > c.max && len(c.order) > 0 {
		id := c.order[0]
		c.order = c.order[1:]
		if old := c.entries[id]; old != nil && old != e {
			c.dropLocked(old)
			evicted = append(evicted, old)
		}
	}
	if len(c.order) > 4*c.max { // compact the ids of dropped entries
		c.order = append([]uint64(nil), c.order[len(c.order)-len(c.entries):]...)
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
	if e.refs.Add(-1) == 0 && e.m != nil {
		c.release(e.m)
	}
}

// close drops every entry; mappings go as their last copy ends (the
// route's gate has drained: none is running).
func (c *mapCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, e := range c.entries {
		c.dropLocked(e)
	}
	c.order = nil
}
