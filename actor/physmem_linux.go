package actor

import "syscall"

// physicalMemory returns the machine's physical memory in bytes
// (sysinfo(2)), or 16 GiB when it cannot be read.
func physicalMemory() uint64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return 16 << 30
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

// fdLimit returns the process's limit on open files (RLIMIT_NOFILE's soft
// limit, which the Go runtime raises to the hard one at start), or 0 when
// it cannot be read.
func fdLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<30 {
		return 0
	}
	return int(l.Cur)
}
