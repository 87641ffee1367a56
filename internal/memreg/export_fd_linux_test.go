package memreg

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// exportOf exports the region of h as a peer's map request does: a
// remote reference held across ExportFD.
func exportOf(t *testing.T, g *Registry, h buffer.Buffer) (int, uint64, error) {
	t.Helper()
	ref, err := g.AcquireRemote(h.Region, h.Key, 0, 1, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	return ref.ExportFD(g)
}

// TestExportingRegistry: a registry that exports gives a readable buffer
// of any size a memfd of its own (no slab), exported as it lies; a
// write-only one stays pooled; a slot of a slab is never exported.
func TestExportingRegistry(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	g.SetExporting()
	h := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	if g.regionOf(t, h).Slab() != nil {
		t.Fatal("a readable 4 KiB buffer of an exporting registry is a slot of a slab")
	}
	fd, off, err := exportOf(t, g, h)
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
	// The exported memfd is never reused: the next buffers never see
	// what the other process writes through what it kept.
	var next [][]byte
	for range maxOwnedSpares + 1 {
		next = append(next, mustBytes(t, g, mustAlloc(t, g, 4096, buffer.AccessReadWrite)))
	}
	kept[1] = 9
	for i, mem := range next {
		if mem[0] != 0 || mem[1] != 0 {
			t.Fatalf("buffer %d after the release shows bytes written through the exported fd", i)
		}
	}

	w := mustAlloc(t, g, 4096, buffer.AccessWrite)
	if g.regionOf(t, w).Slab() == nil {
		t.Error("a write-only buffer (never exported) is not pooled")
	}
	plain := newReg(t, buffer.Limits{})
	p := mustAlloc(t, plain, 4096, buffer.AccessReadWrite)
	if plain.regionOf(t, p).Slab() == nil {
		t.Fatal("a 4 KiB buffer of a registry that does not export is not pooled")
	}
	if fd, _, err := exportOf(t, plain, p); fd != -1 || !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("export of a slot of a slab: fd %d, %v; want ErrNotSupported", fd, err)
	}
}

// TestExportLosesNoOwnerStore: the owner adds to a word of its buffer
// all the while a peer's first map request exports it; every add is
// there. (A pooled slot used to be moved into a memfd of its own at its
// first export: pages copied, then remapped, and an add between the two
// was lost, seen as shm's TestVerbs counting 9717 of 10000.)
func TestExportLosesNoOwnerStore(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	g.SetExporting()
	for range 200 {
		h := mustAlloc(t, g, 4096, buffer.AccessReadWrite|buffer.AccessAtomic)
		word := (*uint64)(unsafe.Pointer(&mustBytes(t, g, h)[8]))
		var wg sync.WaitGroup
		var started, stop atomic.Bool
		var n uint64
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ; n < 100 || !stop.Load(); n++ {
				atomic.AddUint64(word, 1)
				if n == 100 {
					started.Store(true)
				}
			}
		}()
		for !started.Load() {
		}
		fd, _, err := exportOf(t, g, h)
		stop.Store(true)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		if got := atomic.LoadUint64(word); got != n {
			t.Fatalf("counter %d after the export, want %d (lost %d)", got, n, n-got)
		}
		if err := g.Release(context.Background(), h); err != nil {
			t.Fatal(err)
		}
	}
}
