package cudafake

import "github.com/rdmamgr/rdmamgr/internal/cuda"

// HostAlloc implements cuda.Driver: Go memory, counted as pinned.
func (d *Driver) HostAlloc(ctx cuda.Context, size uint64) ([]byte, error) {
	unlock, err := d.lock("cuMemHostAlloc", ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if size == 0 || size > d.w.cfg.DeviceMemory {
		return nil, fail("cuMemHostAlloc", cuda.ErrorOutOfMemory)
	}
	b := make([]byte, size)
	d.addHostLocked(b, true)
	return b, nil
}

func (d *Driver) addHostLocked(b []byte, allocated bool) {
	p, n := span(b)
	d.host = append(d.host, hostRange{start: p, n: n, allocated: allocated})
	d.w.stats.LiveHost++
}

// removeHostLocked removes the range that is exactly b, if it was made
// the same way.
func (d *Driver) removeHostLocked(b []byte, allocated bool) bool {
	p, n := span(b)
	for i, r := range d.host {
		if r.start == p && r.n == n && r.allocated == allocated {
			d.host = append(d.host[:i], d.host[i+1:]...)
			d.w.stats.LiveHost--
			return true
		}
	}
	return false
}

// HostFree implements cuda.Driver.
func (d *Driver) HostFree(ctx cuda.Context, b []byte) error {
	unlock, err := d.lock("cuMemFreeHost", ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if len(b) == 0 || !d.removeHostLocked(b, true) {
		return fail("cuMemFreeHost", cuda.ErrorInvalidValue)
	}
	return nil
}

// HostRegister implements cuda.Driver: overlapping a pinned range fails.
func (d *Driver) HostRegister(ctx cuda.Context, b []byte) error {
	const call = "cuMemHostRegister"
	unlock, err := d.lock(call, ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if len(b) == 0 {
		return fail(call, cuda.ErrorInvalidValue)
	}
	p, n := span(b)
	for _, r := range d.host {
		if p < r.start+r.n && r.start < p+n {
			return fail(call, cuda.ErrorHostMemoryRegistered)
		}
	}
	d.addHostLocked(b, false)
	return nil
}

// HostUnregister implements cuda.Driver.
func (d *Driver) HostUnregister(ctx cuda.Context, b []byte) error {
	unlock, err := d.lock("cuMemHostUnregister", ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if len(b) == 0 || !d.removeHostLocked(b, false) {
		return fail("cuMemHostUnregister", cuda.ErrorHostMemoryNotRegistered)
	}
	return nil
}
