//go:build !linux

package actor

// physicalMemory assumes 16 GiB where sysinfo(2) does not exist.
func physicalMemory() uint64 { return 16 << 30 }

// fdLimit is unknown where no memfd holds a region: 0.
func fdLimit() int { return 0 }
