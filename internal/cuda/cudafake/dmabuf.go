package cudafake

import (
	"sort"

	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// dmabufPage is the host page the driver wants a dma-buf range aligned
// to.
const dmabufPage = 4096

// DmaBufFD implements cuda.Driver: without Config.DmaBuf it fails with
// cuda.ErrorNotSupported (matching rdmamgr.ErrNotSupported), as on a
// device without dma-buf. With it, [p, p+size) must be page aligned,
// non-empty and inside one allocation of this process (its length rounded
// up to the page: the driver backs allocations at least that coarsely);
// memory opened through IPC is refused, as the driver does.
func (d *Driver) DmaBufFD(ctx cuda.Context, p cuda.DevicePtr, size uint64) (int, error) {
	const call = "cuMemGetHandleForAddressRange"
	if d.w.cfg.DmaBuf == nil {
		return -1, fail(call, cuda.ErrorNotSupported)
	}
	d.w.mu.Lock()
	dev, err := d.ctxLocked(call, ctx)
	if err != nil {
		d.w.mu.Unlock()
		return -1, err
	}
	if size == 0 || uint64(p)%dmabufPage != 0 || size%dmabufPage != 0 {
		d.w.mu.Unlock()
		return -1, fail(call, cuda.ErrorInvalidValue)
	}
	i := d.findLockedIn(p)
	if i < 0 || d.maps[i].opened {
		d.w.mu.Unlock()
		return -1, fail(call, cuda.ErrorInvalidValue)
	}
	m := d.maps[i]
	off := uint64(p) - m.addr
	if n := (uint64(len(m.a.mem)) + dmabufPage - 1) &^ (dmabufPage - 1); off >= n || size > n-off {
		d.w.mu.Unlock()
		return -1, fail(call, cuda.ErrorInvalidValue)
	}
	d.w.mu.Unlock()
	fd, err := d.w.cfg.DmaBuf(dev, size)
	if err != nil {
		return -1, err
	}
	d.w.mu.Lock()
	d.w.stats.DmaBufExports++
	d.w.mu.Unlock()
	return fd, nil
}

// findLockedIn returns the index of the last mapping that starts at or
// before p, or -1 (the caller checks p is inside it).
func (d *Driver) findLockedIn(p cuda.DevicePtr) int {
	return sort.Search(len(d.maps), func(i int) bool { return d.maps[i].addr > uint64(p) }) - 1
}
