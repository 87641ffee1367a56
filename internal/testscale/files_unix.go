//go:build unix

package testscale

import "syscall"

// OpenFiles is how many files this process may open (the soft limit,
// which Go raises to the hard one at start; 1<<20 if unknown): a test
// that holds many connections or routes scales them to it.
func OpenFiles() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<20 {
		return 1 << 20
	}
	return int(lim.Cur)
}
