package memreg

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// TestExportFailureSpareStaysExportable: an ExportFD that seals the
// region's memfd and then cannot open an fd of it (the process is out of
// fds) leaves a sealed memfd that is never handed to the next region: its
// seals (F_SEAL_SEAL) would refuse that region's export for good.
func TestExportFailureSpareStaysExportable(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	g.owned = &ownedSpares{max: maxOwnedSpares} // its own: the process's may be full
	g.SetExporting()
	size := uint64(3 * os.Getpagesize())
	h := mustAlloc(t, g, size, buffer.AccessReadWrite)

	ref, err := g.AcquireRemote(h.Region, h.Key, 0, 1, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	withoutFDs(t, func() { fd, _, err = ref.ExportFD(g) })
	ref.Release()
	if err == nil {
		unix.Close(fd)
		t.Fatal("ExportFD opened an fd with none left")
	}
	if !errors.Is(err, unix.EMFILE) {
		t.Fatalf("ExportFD with no fd left: %v, want EMFILE", err)
	}
	if err := g.Release(context.Background(), h); err != nil {
		t.Fatal(err)
	}

	next := mustAlloc(t, g, size, buffer.AccessReadWrite)
	fd, _, err = exportOf(t, g, next)
	if err != nil {
		t.Fatalf("the next buffer of the same size cannot be exported (it got the sealed memfd): %v", err)
	}
	unix.Close(fd)
}

// withoutFDs runs f with the process's fd table full: every fd below a
// lowered soft limit taken. Both are given back before it returns.
func withoutFDs(t *testing.T, f func()) {
	t.Helper()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	null, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(null)
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	top := 0
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > top {
			top = n
		}
	}
	low := lim
	low.Cur = uint64(top) + 64
	if low.Cur >= lim.Cur {
		t.Skipf("fd limit %d too close to the fds open (%d)", lim.Cur, top)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var dups []int
	defer func() {
		for _, d := range dups {
			unix.Close(d)
		}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Error(err)
		}
	}()
	for {
		d, err := unix.Dup(null)
		if err != nil {
			if !errors.Is(err, unix.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		dups = append(dups, d)
	}
	f()
}
