//go:build unix

package tcp

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the process used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
