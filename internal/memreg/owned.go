package memreg

import "sync"

// maxOwnedSpares bounds the memfds of freed unpooled regions kept for
// reuse, and maxOwnedSpare their size. They hold no memory (their pages
// are punched out when freed), only an fd and address space each; two
// serve a loop that allocates and releases large buffers, and an idle
// manager keeps few fds more than it had before its first buffer.
const (
	maxOwnedSpares = 2
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
// (Region.Memfd was not called: no other process can hold it), and its
// pages are punched out first (fallocate PUNCH_HOLE), so it reads as
// zeros and costs no memory while kept.
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

// put keeps m after punching its pages out; it unmaps and closes m when
// the spares are full, m is too large or the punch fails.
func (o *ownedSpares) put(m ownedMap) {
	if punchHole(m.fd, len(m.mem)) == nil {
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
