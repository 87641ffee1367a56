package memreg

import (
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// Refs returns the number of references held on r (test only).
func (r *Region) Refs() int64 { return r.refs.Users() }

// Released reports whether Release has started on r (test only).
func (r *Region) Released() bool { return r.refs.Closed() }

// Drained is closed once r is released and unreferenced (test only).
func (r *Region) Drained() <-chan struct{} { return r.refs.Drained() }

// setCacheMax bounds the registration cache (test only).
func (g *Registry) setCacheMax(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cache.max = n
}

// regionOf returns the region of handle b (test only).
func (g *Registry) regionOf(t testing.TB, b buffer.Buffer) *Region {
	t.Helper()
	r, err := g.lookup(b)
	if err != nil {
		t.Fatalf("lookup %v: %v", b, err)
	}
	return r
}

// ownSpares gives g spare memfds of its own, at most n (test only).
func (g *Registry) ownSpares(n int) *ownedSpares {
	g.owned = &ownedSpares{max: n}
	return g.owned
}

// drop unmaps and closes every kept memfd (test only).
func (o *ownedSpares) drop() {
	o.mu.Lock()
	all := o.bySize
	o.bySize, o.n = nil, 0
	o.mu.Unlock()
	for _, l := range all {
		for _, m := range l {
			memfdUnmap(m.fd, m.mem)
		}
	}
}
