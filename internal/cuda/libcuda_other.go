//go:build !linux || !cgo

package cuda

import "runtime"

// Open fails here: the real driver is loaded only on Linux with cgo. The
// error matches rdmamgr.ErrNotSupported.
func Open() (Driver, error) {
	if runtime.GOOS != "linux" {
		return nil, NotSupported("libcuda.so.1 not loaded: %s builds have no CUDA driver", runtime.GOOS)
	}
	return nil, NotSupported("libcuda.so.1 not loaded: built without cgo")
}
