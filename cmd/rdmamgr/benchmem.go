package main

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// checkMemory checks --memory. Host memory is the bench as ever. A CUDA
// device's (GPU buffers at each end) needs the driver, and then the
// initiator to move its own device memory, which is not built yet (only
// an owner serves its device memory, over TCP): it fails with
// rdmamgr.ErrNotSupported saying which of the two stands in the way.
func (a *benchArgs) checkMemory() error {
	loc, err := buffer.ParseLocation(a.memory)
	if err != nil {
		return usagef("--memory: %v", err)
	}
	if loc == buffer.Host {
		return nil
	}
	d, err := cuda.Open()
	if err != nil {
		return fmt.Errorf("bench --memory %v: %w", loc, err)
	}
	defer d.Close()
	dev, _ := loc.Device()
	if n, err := d.DeviceCount(); err != nil || dev >= n {
		return fmt.Errorf("bench --memory %v: %d devices (%v): %w", loc, n, err, rdmamgr.ErrNotSupported)
	}
	return fmt.Errorf("bench --memory %v: the initiator does not stage its own device memory yet (a peer's GPU buffers are served over TCP; issue 27): %w", loc, rdmamgr.ErrNotSupported)
}
