package buffer

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rdmamgr/rdmamgr"
)

// Location says where a region's memory is: host memory (the zero
// Location) or the memory of one CUDA device. It travels in the handle
// (Buffer.Location, proto field location: 0 host, 1+N device N) and is
// validated on decode: a value naming no known location is refused.
type Location uint32

// Host is host memory, the zero Location.
const Host Location = 0

// MaxCUDADevices bounds the device ordinals a Location may name (0 to
// MaxCUDADevices-1); a handle naming another is refused.
const MaxCUDADevices = 64

// CUDA returns the Location of CUDA device dev's memory; dev must be in
// [0, MaxCUDADevices) (else the Location is not Valid).
func CUDA(dev int) Location {
	if dev < 0 || dev >= MaxCUDADevices {
		return Location(MaxCUDADevices + 1)
	}
	return Location(dev + 1)
}

// Device returns the CUDA device ordinal of l; ok is false for host
// memory (and for an invalid Location).
func (l Location) Device() (dev int, ok bool) {
	if l == Host || !l.Valid() {
		return 0, false
	}
	return int(l) - 1, true
}

// Valid reports whether l names host memory or a device in range.
func (l Location) Valid() bool { return l <= MaxCUDADevices }

// String returns "host" or "cuda:N" (ParseLocation's forms).
func (l Location) String() string {
	if l == Host {
		return "host"
	}
	if dev, ok := l.Device(); ok {
		return "cuda:" + strconv.Itoa(dev)
	}
	return fmt.Sprintf("location(%d)", uint32(l))
}

// ParseLocation parses "host", "cuda" (device 0) or "cuda:N". Anything
// else fails with rdmamgr.ErrInvalid.
func ParseLocation(s string) (Location, error) {
	switch s {
	case "host", "":
		return Host, nil
	case "cuda":
		return CUDA(0), nil
	}
	if n, ok := strings.CutPrefix(s, "cuda:"); ok {
		dev, err := strconv.Atoi(n)
		if err == nil && dev >= 0 && dev < MaxCUDADevices {
			return CUDA(dev), nil
		}
	}
	return 0, fmt.Errorf("memory %q (want host, cuda or cuda:N with N < %d): %w", s, MaxCUDADevices, rdmamgr.ErrInvalid)
}
