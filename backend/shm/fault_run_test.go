//go:build linux

package shm

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// TestRunFaultFailsFromTheFault: a fault while copying a run (a page of
// the importer's mapping made PROT_NONE under the second Put) fails the
// copy it hit and those after it; the Put before it, which landed,
// succeeds alone and is counted.
func TestRunFaultFailsFromTheFault(t *testing.T) {
	const tmo = 30 * time.Second
	rt, regA, regB := listPair(t)
	page := unix.Getpagesize()
	hLocal, local := backendtest.Alloc(t, regA, 4*page, buffer.AccessReadWrite)
	hMapped, mapped := backendtest.Alloc(t, regB, 4*page, buffer.AccessReadWrite)
	if err := backendtest.Do(t, tmo, rt, regA, backend.OpRead, backendtest.Slice(t, hLocal, 0, int(hMapped.Length)), hMapped); err != nil {
		t.Fatal(err) // maps it
	}
	e := rt.cache.get(hMapped.Region, hMapped.Key)
	if e == nil {
		t.Fatal("region not mapped")
	}
	defer rt.cache.unref(e)
	// A whole page inside the importer's mapping, at least one page in.
	base := uintptr(unsafe.Pointer(unsafe.SliceData(e.mem)))
	first := (int(uintptr(page)-base%uintptr(page)) % page) + page
	if first+page > len(e.mem) {
		t.Skip("mapping too small to protect a page in it")
	}
	if err := unix.Mprotect(e.mem[first:first+page], unix.PROT_NONE); err != nil {
		t.Skip("mprotect:", err)
	}
	defer unix.Mprotect(e.mem[first:first+page], unix.PROT_READ|unix.PROT_WRITE)
	for i := range local[:16] {
		local[i] = 0xA5
	}
	ops := []qpbind.InlineOp{
		{Local: local[0:8], Offset: 0, Op: backend.OpWrite},              // lands
		{Local: local[8:16], Offset: uint64(first), Op: backend.OpWrite}, // faults
	}
	errs := make([]error, len(ops))
	failed, ok := rt.RunInline(hMapped.Region, hMapped.Key, ops, errs)
	if !ok {
		t.Fatal("declined")
	}
	if mapped[0] != 0xA5 {
		t.Fatalf("the first Put did not land")
	}
	if !errors.Is(errs[1], errCopyFault) {
		t.Fatalf("the faulting Put: %v, want errCopyFault", errs[1])
	}
	if errs[0] != nil || failed != 1 {
		t.Fatalf("the Put before the fault, which landed: %v (%d failed); want nil, 1 failed", errs[0], failed)
	}
}
