//go:build !linux

package memreg

import "context"

// Off Linux there are no memfds to hand to another process (and no shm
// backend to hand them): nothing is ever exported.

// ExportFD fails with ErrNotSupported off Linux.
func (f Ref) ExportFD(*Registry) (fd int, off uint64, err error) {
	return -1, 0, errNotExportable
}

// unexport has nothing to end: no fd was handed out.
func (g *Registry) unexport(context.Context, *Region) error { return nil }
