package main

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// checkMemory checks --memory and, for a CUDA device's memory (GPU
// buffers at each end), that the driver loads and has the device (else it
// fails with rdmamgr.ErrNotSupported saying why): bench's manager then
// loads it too (node.Config.CUDA.Open), the queue pair stages the local
// buffer and the peer, a serve --cuda daemon, its own. Not with --verify
// (device memory has no host bytes to check) nor --baseline.
func (a *benchArgs) checkMemory() error {
	loc, err := buffer.ParseLocation(a.memory)
	if err != nil {
		return usagef("--memory: %v", err)
	}
	a.loc = loc
	if loc == buffer.Host {
		return nil
	}
	if a.verify || a.bl.on {
		return usagef("--memory %v: not with --verify or --baseline", loc)
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
	a.c.cuda = true
	return nil
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
