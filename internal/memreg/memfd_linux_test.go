package memreg

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// fdID names the file behind an fd, so a test can tell that the fd was
// closed even if its number was reused since.
type fdID struct{ dev, ino uint64 }

func idOf(t testing.TB, fd int) fdID {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatalf("fstat %d: %v", fd, err)
	}
	return fdID{st.Dev, st.Ino}
}

// openFDs counts the fds of fds still open on the same file.
func openFDs(fds map[int]fdID) int {
	n := 0
	for fd, id := range fds {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && (fdID{st.Dev, st.Ino}) == id {
			n++
		}
	}
	return n
}

// TestMemfd checks that allocated memory is the memfd's: a second mapping
// of the fd sees the region's bytes at its offset and the region sees
// writes through it; the fd is sealed; it is closed once the region is
// freed (unpooled) and caller memory has none.
func TestMemfd(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	for _, size := range []uint64{100, 4096, MaxPooled + 1, 1 << 20} {
		b := mustAlloc(t, g, size, buffer.AccessReadWrite)
		fd, off, ok := g.regionOf(t, b).Memfd()
		if !ok || fd < 0 {
			t.Fatalf("size %d: no memfd", size)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || uint64(st.Size) < off+size {
			t.Fatalf("size %d: fstat %v, file %d bytes for offset %d", size, err, st.Size, off)
		}
		other, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatalf("size %d: second mapping: %v", size, err)
		}
		mem := mustBytes(t, g, b)
		mem[0], mem[size-1] = 0x11, 0x22
		if other[off] != 0x11 || other[off+size-1] != 0x22 {
			t.Errorf("size %d: second mapping does not see the region's bytes", size)
		}
		other[off+size/2] = 0x33
		if mem[size/2] != 0x33 {
			t.Errorf("size %d: region does not see a write through the second mapping", size)
		}
		_ = unix.Munmap(other)
		seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
		// F_SEAL_SEAL comes when the memfd is exported (Ref.ExportFD).
		if err != nil || seals&(unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
			t.Errorf("size %d: seals %#x (%v)", size, seals, err)
		}
		if err := unix.Ftruncate(fd, 0); !errors.Is(err, unix.EPERM) {
			t.Errorf("size %d: ftruncate of a sealed memfd: %v, want EPERM", size, err)
		}
		id := idOf(t, fd)
		if err := g.Release(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if size > MaxPooled && openFDs(map[int]fdID{fd: id}) != 0 {
			t.Errorf("size %d: memfd still open after Release", size)
		}
	}
	u, err := g.Register(make([]byte, 64), buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	if fd, _, ok := g.regionOf(t, u).Memfd(); ok || fd != -1 {
		t.Errorf("caller memory reports memfd %d", fd)
	}
}

// mapped reports whether every page of [p, p+n) is mapped (msync fails
// with ENOMEM on unmapped pages).
func mapped(t testing.TB, p unsafe.Pointer, n int) bool {
	t.Helper()
	_, _, e := syscall.Syscall(syscall.SYS_MSYNC, uintptr(p), uintptr(n), syscall.MS_ASYNC)
	switch e {
	case 0:
		return true
	case syscall.ENOMEM:
		return false
	}
	t.Fatalf("msync: %v", e)
	return false
}
