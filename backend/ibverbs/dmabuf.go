//go:build ibverbs

package ibverbs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Device memory (GPU buffers) through dma-buf: a device region's memory
// is registered with the NIC by ibv_reg_dmabuf_mr over a dma-buf fd the
// CUDA driver exports (cuda.Driver.DmaBufFD, cuMemGetHandleForAddressRange),
// so peers' Puts, Gets and atomics on it are plain RDMA at the device
// address. The fd is exported once per device allocation (a pool's 2 MiB
// slab, or a buffer's own allocation) and kept while a region of it has a
// memory region; each region has a remote memory region of its own over
// exactly its bytes (at its offset in the fd), so a peer's rkey grants its
// buffer and nothing else of the slab. There is no local memory region:
// the owner's own device memory never goes through the NIC (the queue
// pair stages it, queuepair/stage.go).
//
// Where it cannot be done the region is left without an RDMA key (its
// allocation succeeds: TCP's staging and shm's IPC still reach it) and
// the reason is kept and logged once: the device says it has no dma-buf
// (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 0), the driver cannot export one
// (DmaBufFD: rdmamgr.ErrNotSupported), or the NIC does not register
// dma-buf (ibv_reg_dmabuf_mr: EOPNOTSUPP, as rdma_rxe). Those verdicts are
// remembered (per device, per backend) so later regions are not tried;
// any other failure is the region's alone.

// dmabufState is a backend's dma-buf registrations; guarded by
// Backend.mrMu.
type dmabufState struct {
	exports map[dmabufKey]*dmabufExport
	devWhy  map[dmabufDev]error // devices that cannot export dma-buf, and why
	nicWhy  error               // the NIC does not register dma-buf: why
	logged  map[string]bool     // reasons logged (at most maxLoggedWhy)
	// reg registers (fd, off, length) at iova; nil: ibv_reg_dmabuf_mr on
	// the backend's protection domain. Tests stand in for the NIC here.
	reg func(fd int, off, length, iova uint64, access int) (*memReg, error)
	// closeFD closes an export's fd (tests count); nil: unix.Close.
	closeFD func(fd int) error
}

const maxLoggedWhy = 16

// dmabufKey names one device allocation of one process's driver.
type dmabufKey struct {
	d    cuda.Driver
	ctx  cuda.Context
	base cuda.DevicePtr
}

type dmabufDev struct {
	d   cuda.Driver
	dev int
}

// dmabufExport is one allocation's dma-buf fd and the memory regions made
// over it that still exist.
type dmabufExport struct {
	key   dmabufKey
	fd    int
	size  uint64
	users int
}

// ErrNoDmaBuf is the reason a device region has no RDMA key: it matches
// rdmamgr.ErrNotSupported.
var ErrNoDmaBuf = fmt.Errorf("no dma-buf registration: %w", rdmamgr.ErrNotSupported)

// RegistersDevice implements memreg.DeviceHooks: device regions come to
// RegisterRegion (registered through dma-buf where the GPU, its driver
// and the NIC can).
func (b *Backend) RegistersDevice() bool { return true }

// registerDeviceLocked registers device region r through dma-buf, or
// leaves it without an RDMA key and records why. The caller holds mrMu.
func (b *Backend) registerDeviceLocked(r *memreg.Region) error {
	ext, _ := r.DeviceExtent()
	access, granted := b.mrAccess(r.Access())
	rd := &regData{b: b, access: granted, length: uint64(r.Len())}
	mr, exp, err := b.dmabuf.register(b, ext, rd.length, access)
	if err != nil {
		rd.why = fmt.Errorf("ibverbs: %v: %w: %w", r.Location(), err, ErrNoDmaBuf)
		b.dmabuf.logOnce(b, r, err)
	} else {
		rd.remote, rd.export = mr, exp
		r.RDMA = buffer.RDMAKey{Addr: mr.addr, RKey: mr.rkey}
	}
	r.BackendData = rd
	b.mrs[r.ID()] = rd
	return nil
}

// mrAccess returns the verbs access of a region's remote memory region
// and the access it grants: LOCAL_WRITE always (the verbs want it with
// REMOTE_WRITE and REMOTE_ATOMIC), REMOTE_READ, REMOTE_WRITE as granted,
// REMOTE_ATOMIC if granted and the device runs atomics.
func (b *Backend) mrAccess(a buffer.Access) (int, buffer.Access) {
	access := accessLocalWrite
	granted := a &^ buffer.AccessAtomic
	if a.Allows(buffer.AccessRead) {
		access |= accessRemoteRead
	}
	if a.Allows(buffer.AccessWrite) {
		access |= accessRemoteWrite
	}
	if a.Allows(buffer.AccessAtomic) && b.atomics {
		access |= accessRemoteAtomic
		granted |= buffer.AccessAtomic
	}
	return access, granted
}

// register makes the remote memory region of length bytes at ext's
// offset, exporting ext's allocation first if no region of it is
// registered. It fails with why not: the device, the driver or the NIC
// (remembered), or this registration alone.
func (s *dmabufState) register(b *Backend, ext memreg.DeviceExtent, length uint64, access int) (*memReg, *dmabufExport, error) {
	if s.nicWhy != nil {
		return nil, nil, s.nicWhy
	}
	dk := dmabufDev{ext.Driver, ext.Dev}
	if why := s.devWhy[dk]; why != nil {
		return nil, nil, why
	}
	if why := deviceDmaBuf(ext); why != nil {
		s.setDevWhy(dk, why)
		return nil, nil, why
	}
	exp, err := s.export(ext)
	if err != nil {
		if errors.Is(err, rdmamgr.ErrNotSupported) {
			why := fmt.Errorf("the CUDA driver exports no dma-buf of device %d: %w", ext.Dev, err)
			s.setDevWhy(dk, why)
			return nil, nil, why
		}
		return nil, nil, fmt.Errorf("dma-buf of device %d memory: %w", ext.Dev, err)
	}
	reg := s.reg
	if reg == nil {
		reg = b.res.regDmabufMR
	}
	iova := uint64(ext.Base) + ext.Off
	mr, err := reg(exp.fd, ext.Off, length, iova, access)
	if err != nil {
		s.release(exp)
		if nicCannotDmabuf(err) {
			s.nicWhy = fmt.Errorf("the NIC does not register dma-buf: %w", err)
			return nil, nil, s.nicWhy
		}
		return nil, nil, err
	}
	exp.users++
	return mr, exp, nil
}

// deviceDmaBuf asks the driver whether ext's device exports dma-buf.
func deviceDmaBuf(ext memreg.DeviceExtent) error {
	v, err := ext.Driver.DeviceAttribute(ext.Dev, cuda.AttrDmaBufSupported)
	if err != nil {
		return fmt.Errorf("device %d: dma-buf attribute: %w", ext.Dev, err)
	}
	if v == 0 {
		return fmt.Errorf("device %d does not export dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 0)", ext.Dev)
	}
	return nil
}

func (s *dmabufState) setDevWhy(dk dmabufDev, why error) {
	if s.devWhy == nil {
		s.devWhy = make(map[dmabufDev]error)
	}
	s.devWhy[dk] = why
}

// export returns the export of ext's allocation, made now (its whole
// extent, rounded up to the page as the driver wants) if none exists.
func (s *dmabufState) export(ext memreg.DeviceExtent) (*dmabufExport, error) {
	k := dmabufKey{ext.Driver, ext.Ctx, ext.Base}
	if e := s.exports[k]; e != nil {
		return e, nil
	}
	page := uint64(os.Getpagesize())
	size := (ext.Size + page - 1) &^ (page - 1)
	fd, err := ext.Driver.DmaBufFD(ext.Ctx, ext.Base, size)
	if err != nil {
		return nil, err
	}
	if s.exports == nil {
		s.exports = make(map[dmabufKey]*dmabufExport)
	}
	e := &dmabufExport{key: k, fd: fd, size: size}
	s.exports[k] = e
	return e, nil
}

// release closes e's fd once no memory region over it is left (before
// the allocation's memory can go back to the device pool: the last
// region's DeregisterRegion comes first).
func (s *dmabufState) release(e *dmabufExport) {
	if e.users > 0 {
		return
	}
	delete(s.exports, e.key)
	closeFD := s.closeFD
	if closeFD == nil {
		closeFD = unix.Close
	}
	_ = closeFD(e.fd)
}

// logOnce logs why a device region has no RDMA key, once per reason.
func (s *dmabufState) logOnce(b *Backend, r *memreg.Region, why error) {
	msg := why.Error()
	if s.logged[msg] || len(s.logged) >= maxLoggedWhy {
		return
	}
	if s.logged == nil {
		s.logged = make(map[string]bool)
	}
	s.logged[msg] = true
	b.log.Warn("device memory not registered with the NIC: peers reach it over TCP only (staged; inside ibverbs routes through their TCP fallback)",
		"region", r.ID(), "location", r.Location(), "why", why)
}

// dropExport gives back rd's share of its export (its remote memory
// region is gone); the caller holds mrMu.
func (rd *regData) dropExport() {
	e := rd.export
	if e == nil {
		return
	}
	rd.export = nil
	e.users--
	rd.b.dmabuf.release(e)
}

// noDeviceKey is the initiator's refusal of a peer's device buffer whose
// handle has no RDMA key: its owner could not register it with its NIC
// (its log says which of GPU, driver or NIC has no dma-buf).
func noDeviceKey(wr *backend.WorkRequest) error {
	return fmt.Errorf("ibverbs: %s on %v: its owner did not register this device memory with its NIC (no dma-buf on its GPU, CUDA driver or NIC; its log says which): %w",
		wr.Op, wr.Remote, ErrNoDmaBuf)
}

// errDeviceNotice refuses a PutWithImm to device memory before any byte
// moves: the owner's check of the notice (memreg.AcquireRemote) refuses
// device regions, after the RDMA WRITE had landed its bytes.
func errDeviceNotice(wr *backend.WorkRequest) error {
	return fmt.Errorf("ibverbs: %s to device memory (%v): the owner's notice check takes host memory only: %w",
		wr.Op, wr.Remote.Location, rdmamgr.ErrNotSupported)
}
