//go:build ibverbs

package ibverbs

import (
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// regData is what the backend keeps in Region.BackendData. A region has
// two memory regions over the same memory: local, with LOCAL_WRITE only,
// whose lkey the owner's own work uses; and remote, with exactly the access
// the region grants, whose rkey handles advertise. Revoking the region
// deregisters remote only, so peers lose access at once while the owner's
// work in flight goes on.
type regData struct {
	b      *Backend
	local  *memReg
	remote *memReg // nil once revoked; guarded by Backend.mrMu
}

// RegisterRegion registers r with the device: LOCAL_WRITE always,
// REMOTE_READ iff the region allows reads, REMOTE_WRITE iff it allows
// writes. It sets r.BackendData and r.RDMA.
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
	mem := r.Mem()
	if len(mem) == 0 {
		return fmt.Errorf("ibverbs: empty region %d: %w", r.ID(), buffer.ErrInvalid)
	}
	access := accessLocalWrite
	if r.Access().Allows(buffer.AccessRead) {
		access |= accessRemoteRead
	}
	if r.Access().Allows(buffer.AccessWrite) {
		access |= accessRemoteWrite
	}
	local, err := b.res.regMR(addrOf(mem), uint64(len(mem)), accessLocalWrite)
	if err != nil {
		return err
	}
	remote, err := b.res.regMR(addrOf(mem), uint64(len(mem)), access)
	if err != nil {
		local.dereg()
		return err
	}
	rd := &regData{b: b, local: local, remote: remote}
	r.BackendData = rd
	r.RDMA = buffer.RDMAKey{Addr: remote.addr, RKey: remote.rkey}
	b.mrs[r.ID()] = rd
	return nil
}

// dereg deregisters both memory regions; the caller holds mrMu.
func (rd *regData) dereg() error {
	var errs []error
	if rd.remote != nil {
		errs = append(errs, rd.remote.dereg())
		rd.remote = nil
	}
	errs = append(errs, rd.local.dereg())
	return errors.Join(errs...)
}

// RevokeRegion cuts peers' access to r: its remote memory region is
// deregistered, so the rkey in every handle of r stops working (peers'
// work fails with a remote access error) before RevokeRegion returns. The
// owner's own use of r goes on through its local memory region.
func (b *Backend) RevokeRegion(r *memreg.Region) error {
	b.life.RLock()
	defer b.life.RUnlock()
	b.mrMu.Lock()
	defer b.mrMu.Unlock()
	rd := b.mrs[r.ID()]
	if rd == nil || rd.remote == nil {
		return nil
	}
	err := rd.remote.dereg()
	rd.remote = nil
	return err
}

// DeregisterRegion deregisters r's memory region. The registry calls it
// once no local work references the region; remote peers' work on it fails
// with a remote access error from then on.
func (b *Backend) DeregisterRegion(r *memreg.Region) error {
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
