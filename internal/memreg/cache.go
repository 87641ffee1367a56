package memreg

import (
	"container/list"
	"unsafe"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// DefaultCacheEntries bounds the registration cache: the caller
// registrations it indexes for reuse.
const DefaultCacheEntries = 4096

// cacheKey is what makes two registrations of caller memory the same: the
// same first byte, the same length, the same access.
type cacheKey struct {
	addr   uintptr
	n      int
	access buffer.Access
}

func keyOf(p []byte, access buffer.Access) cacheKey {
	return cacheKey{addr: uintptr(unsafe.Pointer(&p[0])), n: len(p), access: access}
}

// regCache indexes the live, shareable registrations of caller memory, the
// most recently used first. It holds no registration alive: an entry is
// dropped when its region's release starts, when the region is revoked or
// given a lease (it is no longer shareable), and, least recently used
// first, when more than max entries would be indexed (the region itself
// stays registered for its holders). Guarded by Registry.mu.
type regCache struct {
	max          int
	byKey        map[cacheKey]*list.Element // of *Region
	byRegion     map[*Region]cacheKey
	lru          list.List
	hits, misses uint64
}

func newRegCache(max int) *regCache {
	return &regCache{max: max, byKey: make(map[cacheKey]*list.Element), byRegion: make(map[*Region]cacheKey)}
}

// get returns the cached region of k (nil when none), the most recently
// used from then on.
func (c *regCache) get(k cacheKey) *Region {
	e := c.byKey[k]
	if e == nil {
		return nil
	}
	c.lru.MoveToFront(e)
	return e.Value.(*Region)
}

// put indexes r under k unless k is indexed already (two Registers that
// missed at once: the first stays the shared one).
func (c *regCache) put(k cacheKey, r *Region) {
	if c.max <= 0 || c.byKey[k] != nil {
		return
	}
	if c.lru.Len() >= c.max {
		c.remove(c.lru.Back().Value.(*Region))
	}
	c.byKey[k] = c.lru.PushFront(r)
	c.byRegion[r] = k
}

// remove drops r from the index, if it is there.
func (c *regCache) remove(r *Region) {
	k, ok := c.byRegion[r]
	if !ok {
		return
	}
	c.lru.Remove(c.byKey[k])
	delete(c.byKey, k)
	delete(c.byRegion, r)
}
