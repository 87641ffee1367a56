package memreg

import (
	"errors"
	"os"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"golang.org/x/sys/unix"
)

// TestAllocateHostExhausted: an allocation the host cannot back (here:
// no file descriptor left for its memfd) fails with ErrLimit, the
// sentinel of the registry's own caps, so a remote RequestBuffer caller
// can branch on it (not INTERNAL).
func TestAllocateHostExhausted(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	g.ownSpares(maxOwnedSpares) // no spare memfd of an earlier test serves the allocation
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(len(ents)) + 8
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	var fill []int // take every fd left
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		fill = append(fill, fd)
	}
	_, err = g.Allocate(4<<20, buffer.AccessReadWrite) // not pooled: a memfd of its own
	for _, fd := range fill {
		unix.Close(fd)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, rdmamgr.ErrLimit) || !errors.Is(err, unix.EMFILE) {
		t.Fatalf("Allocate with no fd left: %v, want ErrLimit (EMFILE)", err)
	}
	if st := g.Stats(); st.Regions != 0 || st.Bytes != 0 {
		t.Fatalf("a failed allocation left %+v", st)
	}
	if _, err := g.Allocate(4<<20, buffer.AccessReadWrite); err != nil {
		t.Fatalf("Allocate once fds are back: %v", err)
	}
}
