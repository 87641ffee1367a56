//go:build !linux

package memreg

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
)

// Off Linux there is no memfd: allocated memory is ordinary Go memory of
// its own (the region holds it, and Go's collector never moves it), with
// no fd to pass to another process (fd -1, so Region.Memfd says no). Only
// the TCP backend runs off Linux, and it needs no fd.

// memfdMap returns size zeroed bytes and fd -1.
func memfdMap(_ string, size int) (fd int, mem []byte, err error) {
	return -1, make([]byte, size), nil
}

// memfdUnmap drops mem; the collector frees it once nothing references it.
func memfdUnmap(int, []byte) {}

// punchHole is not supported off Linux: a freed region's memory is not
// kept for reuse.
func punchHole(fd, n int) error {
	return fmt.Errorf("punch %d bytes of fd %d: %w", n, fd, rdmamgr.ErrNotSupported)
}

// memfdMapOpen is memfdMap (there are no seals to leave open).
func memfdMapOpen(name string, size int) (fd int, mem []byte, err error) {
	return memfdMap(name, size)
}
