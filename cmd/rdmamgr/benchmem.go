package main

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// checkMemory checks --memory and --peer-memory and, for a CUDA device's
// memory at this end (a GPU buffer), that the driver loads and has the
// device (else it fails with rdmamgr.ErrNotSupported saying why): bench's
// manager then loads it too (node.Config.CUDA.Open) and the queue pair
// stages the local buffer; a peer's GPU buffer is its owner's (a serve
// --cuda daemon) to stage, or, where this machine has a driver too,
// shm's to open through CUDA IPC (host memory here then page-locked with
// it on the first copy: memreg.PinHost). Not with --verify (device memory has no host
// bytes to check) nor --baseline.
func (a *benchArgs) checkMemory() error {
	loc, err := buffer.ParseLocation(a.memory)
	if err != nil {
		return usagef("--memory: %v", err)
	}
	a.loc = loc
	if a.peerMemory != "" {
		p, err := buffer.ParseLocation(a.peerMemory)
		if err != nil {
			return usagef("--peer-memory: %v", err)
		}
		a.peerLoc = &p
	}
	for _, f := range []struct {
		flag string
		loc  buffer.Location
	}{{"--memory", loc}, {"--peer-memory", a.peerLocation()}} {
		if f.loc != buffer.Host && (a.verify || a.bl.on) {
			return usagef("%s %v: not with --verify or --baseline", f.flag, f.loc)
		}
	}
	if loc == buffer.Host {
		if a.peerLocation() != buffer.Host {
			a.c.cuda = cudaHere() // shm then opens the peer's GPU buffer through CUDA IPC; else its owner stages it
		}
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
	a.c.cuda = true
	return nil
}

// cudaHere reports whether this machine's CUDA driver loads and names a
// device (serve --cuda's check).
func cudaHere() bool { return checkCUDA(true) == nil }

// peerLocation is where the peer's buffer is: --peer-memory, else --memory.
func (a *benchArgs) peerLocation() buffer.Location {
	if a.peerLoc != nil {
		return *a.peerLoc
	}
	return a.loc
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
