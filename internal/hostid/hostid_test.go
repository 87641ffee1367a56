//go:build linux

package hostid

import "testing"

// The kernel's id is stable; a name splits it, each name its own id.
func TestNamesSplitTheHost(t *testing.T) {
	k1, err := Of("")
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := Of("")
	a, _ := Of("A")
	a2, _ := Of("A")
	b, _ := Of("B")
	if k1 != k2 || a != a2 {
		t.Fatal("host id not stable")
	}
	if k1 == a || a == b || k1 == b || k1 == ([Size]byte{}) {
		t.Fatalf("ids collide: kernel %x A %x B %x", k1[:4], a[:4], b[:4])
	}
}
