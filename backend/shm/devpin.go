//go:build linux

package shm

import (
	"fmt"
	"sync/atomic"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// A peer's memfd-backed host region moved to or from the caller's own
// device memory (copyDeviceHost) goes straight between the device and the
// mapping when the mapping is registered with the driver (page-locked,
// HostRegister): one DMA per chunk, as the vendor's pinned copies, where
// the Stager's way is a device copy into a pinned buffer and a CPU copy
// from it (about 10 GB/s on one core, against some 50 over PCIe Gen5).
// The other way round, the caller's host memory moved to or from a peer's
// device region opened through IPC (copyDevice) goes straight when the
// caller's registry page-locks that memory (memreg.PinHost).
//
// A mapping is registered on the first such operation of at least pinMin
// bytes through it, if it is no larger than pinMax and the route's
// mappings registered so far leave room for it in pinBudget (else that
// operation is staged, and a later one tries again), once per mapping
// (its regions share it). The registration runs without the cache's
// lock: only the copier registers, and a mapping it holds an entry of is
// not released meanwhile. It is undone just before the mapping is
// unmapped (mapCache.release), or at the route's end for mappings a proxy
// still holds (unpinAll), before the route's devices go. A registration
// the driver refuses (a mapping it cannot lock) is not tried again on
// that mapping: its operations keep the Stager's way.
const (
	pinMin    = 1 << 20
	pinMax    = 4 << 30
	pinBudget = 8 << 30 // per route: a peer's pages this process locks
	pinChunk  = 4 << 20 // one DMA between the checks: about 80 µs at 50 GB/s
)

// Registration states of a mapping (mapping.pin.state).
const (
	pinUntried = iota
	pinBusy    // the copier is registering it
	pinDone
	pinRefused
)

// hostPin is a mapping's registration with a driver: the context it was
// made in, to undo it. d and ctx are written before state says pinDone;
// state is read without a lock (the copier's check on every large copy).
type hostPin struct {
	d     cuda.Driver
	ctx   cuda.Context
	state atomic.Uint32
}

// pinned reports whether e's mapping is registered with the driver for a
// device copy of n bytes, registering it now where it should be (the
// copier's; the caller holds a reference to e, so the mapping stays).
func (r *route) pinned(rd *routeDev, e *entry, n uint64) bool {
	if e.m == nil || n < pinMin || uint64(len(e.m.mem)) > pinMax {
		return false
	}
	m, c := e.m, r.cache
	switch m.pin.state.Load() {
	case pinDone:
		return true // portable: any context of this process
	case pinBusy, pinRefused:
		return false
	}
	if !m.pin.state.CompareAndSwap(pinUntried, pinBusy) {
		return m.pin.state.Load() == pinDone
	}
	size := int64(len(m.mem))
	if c.pinned.Add(size) > pinBudget {
		c.pinned.Add(-size)
		m.pin.state.Store(pinUntried)
		return false
	}
	if err := rd.d.HostRegister(rd.ctx, m.mem); err != nil {
		c.pinned.Add(-size)
		m.pin.state.Store(pinRefused)
		if ok, dropped := r.b.logs.ended.Allow(); ok {
			r.b.log.Warn("shm: the driver cannot page-lock a peer's mapping; device copies to and from it are staged",
				"peer", fmt.Sprintf("%016x", r.peerID), "bytes", len(m.mem), "err", err, "suppressed", dropped)
		}
		return false
	}
	m.pin.d, m.pin.ctx = rd.d, rd.ctx
	m.pin.state.Store(pinDone)
	return true
}

// unpin undoes m's registration, if it has one (c.mu held, before the
// munmap or the route's devices' end; no copier registers m meanwhile).
func (m *mapping) unpin(c *mapCache) {
	if m.pin.state.Load() == pinDone {
		_ = m.pin.d.HostUnregister(m.pin.ctx, m.mem)
		c.pinned.Add(-int64(len(m.mem)))
	}
	m.pin.state.Store(pinUntried)
}

// copyPinned moves remote, wr's bytes of e's registered mapping, to or
// from the caller's device memory s (the slot is entered already; cut is
// set where it was cut).
func (r *route) copyPinned(rd *routeDev, e *entry, wr *backend.WorkRequest, s *memreg.DeviceSpan, remote []byte, cut *uint64) error {
	return r.copyStraight(rd, e, wr, remote, s.Ptr, wr.Op == backend.OpRead, cut)
}

// copyLocalPinned moves wr's local host bytes, page-locked by the local
// registry, to or from e's device region opened through IPC.
func (r *route) copyLocalPinned(e *entry, wr *backend.WorkRequest, cut *uint64) error {
	ptr := e.dev.ptr + cuda.DevicePtr(wr.Remote.Offset)
	return r.copyStraight(e.dev.rd, e, wr, wr.Local, ptr, wr.Op == backend.OpWrite, cut)
}

// copyStraight copies page-locked host to device memory at dev (toDevice)
// or back, in chunks of pinChunk on rd's stream, each waited for before
// the check of the operation's end and e's slot's state (entered by the
// caller; cut set where it was cut).
func (r *route) copyStraight(rd *routeDev, e *entry, wr *backend.WorkRequest, host []byte, dev cuda.DevicePtr, toDevice bool, cut *uint64) error {
	n := uint64(len(host))
	for done := uint64(0); done < n; {
		if done > 0 {
			if err := r.checkChunk(e, wr, cut); err != nil {
				return err
			}
		}
		k := min(pinChunk, n-done)
		var err error
		if toDevice {
			err = rd.d.CopyHtoD(rd.ctx, dev+cuda.DevicePtr(done), host[done:done+k], rd.stream)
		} else {
			err = rd.d.CopyDtoH(rd.ctx, host[done:done+k], dev+cuda.DevicePtr(done), rd.stream)
		}
		if err == nil {
			err = rd.d.StreamSynchronize(rd.ctx, rd.stream)
		}
		if err != nil {
			return err
		}
		done += k
	}
	return nil
}

// unpinAll undoes the registration of every mapping still held (by an
// agent's proxy, past the route's end): the route's devices, whose
// contexts the registrations were made in, go next (Close). No copier
// runs any more; a proxy's host access needs no registration.
func (c *mapCache) unpinAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.maps {
		m.unpin(c)
	}
}
