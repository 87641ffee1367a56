package memreg

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// CUDA returns the driver SetCUDA gave (nil: none), for a data path that
// opens device memory of other processes (shm's CUDA IPC initiator).
func (g *Registry) CUDA() cuda.Driver {
	g.dev.mu.Lock()
	defer g.dev.mu.Unlock()
	return g.dev.d
}

// ExportIPC returns a CUDA IPC handle naming the device region f reaches,
// for another process of the host (shm's map reply), with the region's
// device and length. A handle names a whole allocation and the process
// that opens it can read and write all of it, so only a region that is an
// allocation of its own (cuda.Block.Own: larger than cuda.MaxPooled) and
// that grants both read and write is exported; anything else fails with
// rdmamgr.ErrNotSupported (the caller's path falls back to staging). The
// allocation is freed, never reused, once the region is (cuda.Pool).
func (f Ref) ExportIPC() (h cuda.IPCHandle, dev int, size uint64, err error) {
	if f.r == nil || f.r.dev == nil {
		return h, 0, 0, fmt.Errorf("IPC export of host memory: %w", rdmamgr.ErrNotSupported)
	}
	r := f.r
	switch {
	case !r.dev.block.Own():
		return h, 0, 0, fmt.Errorf("IPC export of a pooled device slot (its allocation holds other buffers): %w", rdmamgr.ErrNotSupported)
	case !r.access.Allows(buffer.AccessReadWrite):
		return h, 0, 0, fmt.Errorf("IPC export of a %s device buffer (a CUDA IPC mapping reads and writes): %w", r.access, rdmamgr.ErrNotSupported)
	}
	p := r.dev.pool
	h, err = p.pool.Driver().IPCGetMemHandle(p.ctx, r.dev.block.Ptr)
	if err != nil {
		return h, 0, 0, err
	}
	return h, p.dev, r.size, nil
}
