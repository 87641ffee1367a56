package memreg

import "sync"

// maxOwnedSpares bounds the memfds of freed unpooled regions kept for
// reuse, and maxOwnedSpare their size. They hold no memory (their pages
// are punched out when freed), only an fd and address space each; 16
// serve a loop that allocates and releases a batch of buffers (a
// registry that exports allocates even small readable buffers this way:
// SetExporting), and an idle manager keeps few fds more than it had
// before its first buffer.
const (
	maxOwnedSpares = 16
	maxOwnedSpare  = 16 << 20
)

// ownedMap is the memfd and whole mapping of an unpooled region.
type ownedMap struct {
	fd  int
	mem []byte
}

// spareMemfds is the process's one ownedSpares, shared by its registries,
// so that the fds kept stay few however many managers a process runs.
var spareMemfds = ownedSpares{max: maxOwnedSpares}

// ownedSpares keeps the memfds of freed unpooled regions, by size, so
// that allocating and releasing large buffers makes no memfd and no
// mapping each time. A memfd is kept only if it never left the registry
// (Region.Memfd was not called: no other process can hold it), and it
// reads as zeros: its pages are punched out first (fallocate PUNCH_HOLE,
// so it costs no memory while kept), or, up to MaxPooled bytes, zeroed.
type ownedSpares struct {
	mu     sync.Mutex // guards the fields below
	bySize map[int][]ownedMap
	n      int
	max    int
}

// get returns a kept memfd of exactly size bytes.
func (o *ownedSpares) get(size int) (ownedMap, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.bySize[size]
	if len(l) == 0 {
		return ownedMap{}, false
	}
	m := l[len(l)-1]
	o.bySize[size] = l[:len(l)-1]
	o.n--
	return m, true
}

// put keeps m after punching its pages out, or zeroing them when m is
// no larger than MaxPooled (as a slot of a slab is: a fault on a fresh
// shared page costs far more than zeroing a few of them, and 16 such
// spares hold 1 MiB at most); it unmaps and closes m when the spares are
// full, m is too large or the punch fails.
func (o *ownedSpares) put(m ownedMap) {
	zeroed := len(m.mem) <= MaxPooled
	if zeroed {
		clear(m.mem)
	}
	if zeroed || punchHole(m.fd, len(m.mem)) == nil {
		o.mu.Lock()
		kept := o.n < o.max && len(m.mem) <= maxOwnedSpare
		if kept {
			if o.bySize == nil {
				o.bySize = make(map[int][]ownedMap)
			}
			o.bySize[len(m.mem)] = append(o.bySize[len(m.mem)], m)
			o.n++
		}
		o.mu.Unlock()
		if kept {
			return
		}
	}
	memfdUnmap(m.fd, m.mem)
}
