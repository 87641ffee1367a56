package main

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// checkMemory checks --memory. Host memory is the bench as ever. A CUDA
// device's (GPU buffers at each end) needs the driver, and then the
// bench to place its buffers there, which is not built yet (the queue
// pair stages a local device buffer, and an owner serves its own over
// TCP): it fails with rdmamgr.ErrNotSupported saying which of the two
// stands in the way.
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
	return fmt.Errorf("bench --memory %v: bench does not place its buffers in device memory yet (the queue pair stages a local GPU buffer and a peer serves its own over TCP; issue 27): %w", loc, rdmamgr.ErrNotSupported)
}

// checkCUDA is serve --cuda's check (on: asked for) that the CUDA driver
// loads and names a device: a daemon asked to serve GPU buffers that
// cannot refuses to start, with rdmamgr.ErrNotSupported saying why.
func checkCUDA(on bool) error {
	if !on {
		return nil
	}
	d, err := cuda.Open()
	if err != nil {
		return fmt.Errorf("serve --cuda: %w", err)
	}
	defer d.Close()
	if n, err := d.DeviceCount(); err != nil || n == 0 {
		return fmt.Errorf("serve --cuda: %d devices (%v): %w", n, err, rdmamgr.ErrNotSupported)
	}
	return nil
}
