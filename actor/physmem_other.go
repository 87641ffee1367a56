//go:build !linux

package actor

// physicalMemory assumes 16 GiB where sysinfo(2) does not exist.
func physicalMemory() uint64 { return 16 << 30 }
