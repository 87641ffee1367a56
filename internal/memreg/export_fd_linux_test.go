package memreg

import (
	"context"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// TestExportedSlotFreed: a pooled region handed to another process (its
// fd kept and mapped) is released; its slot goes to the next buffer, and
// writes through what the other process kept never reach that buffer.
func TestExportedSlotFreed(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	h := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	r := g.regionOf(t, h)
	slot := &mustBytes(t, g, h)[0]
	ref, err := g.AcquireRemote(h.Region, h.Key, 0, 1, buffer.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	fd, off, err := ref.ExportFD(g)
	ref.Release()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size != 4096 || off != 0 {
		t.Fatalf("exported file of %d bytes, region at %d (%v): want one page", st.Size, off, err)
	}
	kept, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(kept)
	kept[0] = 7
	if mustBytes(t, g, h)[0] != 7 {
		t.Fatal("the exported fd does not reach the region")
	}
	if err := g.Release(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	h2 := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	mem := mustBytes(t, g, h2)
	if &mem[0] != slot || g.regionOf(t, h2).Slab() != r.Slab() {
		t.Skip("the next buffer got another slot: nothing to show")
	}
	if mem[0] != 0 {
		t.Fatal("the next buffer in the slot shows the previous one's byte")
	}
	kept[1] = 9
	if mem[1] != 0 {
		t.Fatal("a write through the kept fd reached the next buffer in the slot")
	}
}
