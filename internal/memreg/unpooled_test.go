package memreg

import (
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// After SetUnpooled, a small allocation gets a memfd of its own: no slab
// is mapped for it.
func TestSetUnpooled(t *testing.T) {
	g := NewRegistry(1, buffer.Limits{})
	if _, err := g.Allocate(4096, buffer.AccessReadWrite); err != nil {
		t.Fatal(err)
	}
	if g.Stats().Slabs == 0 {
		t.Fatal("a pooled allocation mapped no slab")
	}
	u := NewRegistry(2, buffer.Limits{})
	u.SetUnpooled()
	if _, err := u.Allocate(4096, buffer.AccessReadWrite); err != nil {
		t.Fatal(err)
	}
	if n := u.Stats().Slabs; n != 0 {
		t.Fatalf("%d slabs after SetUnpooled", n)
	}
}
