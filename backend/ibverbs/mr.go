//go:build ibverbs

package ibverbs

import (
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// regData is what the backend keeps in Region.BackendData. A region has
// two memory regions over the same memory: local, with LOCAL_WRITE only,
// whose lkey the owner's own work uses; and remote, with exactly the access
// the region grants, whose rkey handles advertise. Revoking the region
// deregisters remote only, so peers lose access at once while the owner's
// work in flight goes on.
//
// A pooled region (a slot of a memreg slab) has no local memory region of
// its own: local is its slab's, registered once when the slab's first
// region is and deregistered by DeregisterSlab when the registry unmaps the
// slab. Its remote memory region covers exactly the slot's bytes (ibv_reg_mr
// of part of memory registered already), so a peer's rkey grants its
// buffer and nothing else of the slab.
//
// A proxy region (memreg.RegisterProxy: a host agent's mapping of an
// attached process's region) is registered like any region, with exactly
// its access; its remote memory region holds one entry of the proxy's
// gate for as long as it exists (the device's accesses take no Ref), so
// the owner's cut waits until it is gone (RevokeRegion, on the agent's
// revoke of the proxy). via and procRegion name the process and region it
// stands for, recorded at the first resolve answered for it (via_serve.go).
type regData struct {
	b      *Backend
	local  *memReg
	shared bool    // local is the slab's
	remote *memReg // nil once revoked; guarded by Backend.mrMu

	access buffer.Access // what remote grants
	length uint64
	gate   memreg.Gate // a proxy's, entered while remote exists; guarded by mrMu

	via        uint16 // guarded by mrMu
	procRegion uint64 // guarded by mrMu

	// A proxy's initiators (via_inval.go): the routes that resolved it,
	// and, once its invalidation began, why (no route records it after).
	resolvers map[*route]struct{} // guarded by mrMu
	invalWhy  rdmapb.Code         // guarded by mrMu

	// A device region (dmabuf.go) has no local memory region: remote is
	// over export's dma-buf fd (guarded by mrMu), or, never registered,
	// why says why not (ErrNoDmaBuf).
	export *dmabufExport
	why    error
}

// RegisterRegion registers r with the device: LOCAL_WRITE always,
// REMOTE_READ iff the region allows reads, REMOTE_WRITE iff it allows
// writes, REMOTE_ATOMIC iff it allows atomics (and the device runs them).
// It sets r.BackendData and r.RDMA. A device region is registered through
// dma-buf where it can be, else left without an RDMA key (dmabuf.go).
func (b *Backend) RegisterRegion(r *memreg.Region) error {
	b.life.RLock()
	defer b.life.RUnlock()
	if b.closed.Load() || !b.started {
		return nil // no RDMA for regions made after Close: TCP still reaches them
	}
	return b.registerLocked(r)
}

func (b *Backend) registerLocked(r *memreg.Region) error {
	b.mrMu.Lock()
	defer b.mrMu.Unlock()
	if _, ok := b.mrs[r.ID()]; ok {
		return nil
	}
	if r.BackendData != nil {
		return fmt.Errorf("ibverbs: region %d already registered by another backend", r.ID())
	}
	if r.Kind() == memreg.KindDevice {
		return b.registerDeviceLocked(r) // dmabuf.go
	}
	mem := r.Mem()
	if len(mem) == 0 {
		return fmt.Errorf("ibverbs: empty region %d: %w", r.ID(), rdmamgr.ErrInvalid)
	}
	access, granted := b.mrAccess(r.Access())
	gate := r.ProxyGate()
	if gate != nil {
		if err := gate.Enter(); err != nil {
			return fmt.Errorf("ibverbs: proxy region %d: %w", r.ID(), err)
		}
	}
	local, shared, err := b.localMRLocked(r)
	var remote *memReg
	if err == nil {
		remote, err = b.res.regMR(addrOf(mem), uint64(len(mem)), access)
		if err != nil && !shared {
			local.dereg()
		}
	}
	if err != nil {
		if gate != nil {
			gate.Leave()
		}
		return err
	}
	rd := &regData{b: b, local: local, shared: shared, remote: remote, access: granted, length: uint64(len(mem)), gate: gate}
	r.BackendData = rd
	r.RDMA = buffer.RDMAKey{Addr: remote.addr, RKey: remote.rkey}
	b.mrs[r.ID()] = rd
	return nil
}

// localMRLocked returns the local memory region for r: its slab's (made on
// the slab's first region) when r is pooled, else one of its own. The
// caller holds mrMu.
func (b *Backend) localMRLocked(r *memreg.Region) (mr *memReg, shared bool, err error) {
	s := r.Slab()
	if s == nil {
		mem := r.Mem()
		mr, err = b.res.regMR(addrOf(mem), uint64(len(mem)), accessLocalWrite)
		return mr, false, err
	}
	if mr = b.slabs[s.ID()]; mr != nil {
		return mr, true, nil
	}
	mem := s.Mem()
	if mr, err = b.res.regMR(addrOf(mem), uint64(len(mem)), accessLocalWrite); err != nil {
		return nil, false, err
	}
	b.slabs[s.ID()] = mr
	return mr, true, nil
}

// DeregisterSlab deregisters the local memory region of slab s; the
// registry calls it once the slab's last region was deregistered, before
// it unmaps the slab.
func (b *Backend) DeregisterSlab(s *memreg.Slab) error {
	b.life.RLock()
	defer b.life.RUnlock()
	b.mrMu.Lock()
	defer b.mrMu.Unlock()
	mr := b.slabs[s.ID()]
	if mr == nil {
		return nil
	}
	delete(b.slabs, s.ID())
	return mr.dereg()
}

// dereg deregisters both memory regions (the local one unless it is the
// slab's); the caller holds mrMu.
func (rd *regData) dereg() error {
	var errs []error
	errs = append(errs, rd.dropRemote())
	if !rd.shared && rd.local != nil { // a device region has none
		errs = append(errs, rd.local.dereg())
	}
	return errors.Join(errs...)
}

// RevokeRegion cuts peers' access to r: its remote memory region is
// deregistered, so the rkey in every handle of r stops working (peers'
// work fails with a remote access error) before RevokeRegion returns. The
// owner's own use of r goes on through its local memory region. A proxy
// that host agents' routes resolved is invalidated on them first
// (via_inval.go: bounded by invalidateWait).
func (b *Backend) RevokeRegion(r *memreg.Region) error {
	if !b.closed.Load() {
		b.invalidate(r.ID(), rdmapb.Code_REVOKED)
	}
	b.life.RLock()
	defer b.life.RUnlock()
	b.mrMu.Lock()
	defer b.mrMu.Unlock()
	rd := b.mrs[r.ID()]
	if rd == nil {
		return nil
	}
	return rd.dropRemote()
}

// dropRemote deregisters the remote memory region, if not yet, and then
// leaves a proxy's gate; the caller holds mrMu.
func (rd *regData) dropRemote() error {
	if rd.remote == nil {
		return nil
	}
	err := rd.remote.dereg()
	rd.remote = nil
	rd.dropExport() // a device region's dma-buf, closed after its last memory region
	if rd.gate != nil {
		rd.gate.Leave()
		rd.gate = nil
	}
	return err
}

// DeregisterRegion deregisters r's memory region. The registry calls it
// once no local work references the region; remote peers' work on it fails
// with a remote access error from then on. A proxy that host agents'
// routes resolved is invalidated on them first (as RevokeRegion does).
func (b *Backend) DeregisterRegion(r *memreg.Region) error {
	if !b.closed.Load() {
		b.invalidate(r.ID(), rdmapb.Code_RELEASED)
	}
	b.life.RLock()
	defer b.life.RUnlock()
	b.mrMu.Lock()
	defer b.mrMu.Unlock()
	rd := b.mrs[r.ID()]
	if rd == nil {
		return nil
	}
	delete(b.mrs, r.ID())
	return rd.dereg()
}
