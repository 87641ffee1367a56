package actor

import (
	"syscall"
	"testing"
)

// TestRegionsFollowFDLimit: the default cap on regions is at most half
// the open-file limit, as each buffer of a manager running shm holds a
// memfd: past it a request fails with ErrLimit instead of the process
// running out of fds for its sockets.
func TestRegionsFollowFDLimit(t *testing.T) {
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	lim := old
	lim.Cur = 2000
	if lim.Max < lim.Cur {
		t.Skipf("hard limit %d", lim.Max)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	got := DefaultConfig().Limits.MaxRegions
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if got > 1000 || got < 64 {
		t.Fatalf("regions %d with 2000 open files allowed, want at most 1000", got)
	}
}
