//go:build unix

package tcp

import "syscall"

// openFileLimit is how many files this process may open (the soft limit,
// which Go raises to the hard one at start; 1<<20 if unknown).
func openFileLimit() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<20 {
		return 1 << 20
	}
	return int(lim.Cur)
}
