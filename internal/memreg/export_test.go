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

// setOwnedSpares bounds the kept memfds of unpooled regions (test only).
func (g *Registry) setOwnedSpares(n int) {
	g.owned.mu.Lock()
	defer g.owned.mu.Unlock()
	g.owned.max = n
}
