package memreg

import (
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// After SetUnpooled, even a small region gets a memfd of its own, no slab.
func TestSetUnpooled(t *testing.T) {
	g := NewRegistry(1, buffer.Limits{})
	pooled, err := g.Allocate(64, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if r := g.regions[pooled.Region]; r.Slab() == nil {
		t.Fatal("a 64-byte region outside the pool by default")
	}
	g.SetUnpooled()
	own, err := g.Allocate(64, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	r := g.regions[own.Region]
	if r.Slab() != nil || r.fd < 0 || len(r.mapping)%g.pageSize != 0 {
		t.Fatalf("unpooled region: slab %v, fd %d, mapping %d", r.Slab(), r.fd, len(r.mapping))
	}
}
