package memreg

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Exporting a region to another process (package doc, "Exported means
// only that region"): the other process gets a memfd that holds the
// region's pages and nothing else, with no more access than the region
// grants, and loses the region's memory when it is revoked or freed.

// ExportFD returns a new fd (the caller closes it once passed) of a memfd
// that holds exactly the pages of the region f references, the region at
// offset off in it. The fd is read-write when the region allows remote
// writes, else read-only, and a read-only region's memfd is sealed
// against writing (F_SEAL_FUTURE_WRITE), so no reopening gives more. The
// region is exported as it lies: its pages are never moved (a move would
// lose the owner's stores made during it). It fails with ErrNotSupported
// for caller memory, a region without read access, a registry whose hooks
// pin memory (an RDMA device holds the pages a revocation would replace),
// or a slot of a slab (its memfd holds other regions: a registry that
// exports allocates readable regions on their own, SetExporting). The
// caller holds f.
func (f Ref) ExportFD(g *Registry) (fd int, off uint64, err error) {
	r := f.r
	if r == nil || r.kind != KindAllocated || !r.access.Allows(buffer.AccessRead) || g.pinsMemory() {
		return -1, 0, errNotExportable
	}
	if r.slab != nil {
		return -1, 0, fmt.Errorf("region %d is a slot of a slab shared with other regions (its registry does not export: SetExporting): %w", r.id, errNotExportable)
	}
	e := &r.exp
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.revoked.Load() || r.refs.Closed() {
		return -1, 0, rdmamgr.ErrRevoked
	}
	if e.mem == nil {
		if err := g.promote(r); err != nil {
			return -1, 0, err
		}
		// Sealed now (F_SEAL_SEAL): even if no fd of it leaves (the
		// reopen below fails, as when the process is out of fds), the
		// memfd is never a spare: its seals would refuse the export of
		// the region that reused it.
		r.exported.Store(true)
	}
	mode := unix.O_RDONLY
	if r.access.Allows(buffer.AccessWrite) {
		mode = unix.O_RDWR
	}
	fd, err = unix.Open(fmt.Sprintf("/proc/self/fd/%d", e.fd), mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, 0, fmt.Errorf("reopen region %d's memfd: %w", r.id, err)
	}
	e.passed = true
	r.exported.Store(true)
	return fd, e.off, nil
}

// promote seals r's own memfd for export and makes it r's private one.
// r.exp.mu is held; r is not pooled.
func (g *Registry) promote(r *Region) error {
	if err := sealExport(r.fd, r.access); err != nil {
		return err
	}
	e := &r.exp
	e.fd, e.mem, e.off = r.fd, r.mapping, r.fdOff
	return nil
}

// move copies mem (page aligned, the pages of r) into a fresh memfd and
// maps that memfd over mem, at the same address, so every slice of r
// stays valid and now reaches the new pages. While it runs, new
// references to r wait; it first waits (ctx) until none is held. Only
// Revoke moves a region (unexport), on the owner's word: a store the
// owner makes into the region meanwhile may be lost. It returns the new
// memfd.
func (g *Registry) move(ctx context.Context, r *Region, mem []byte) (int, error) {
	r.moving.Store(true)
	defer r.moving.Store(false)
	for d := 20 * time.Microsecond; r.refs.Users() > 0; d = min(2*d, time.Millisecond) {
		if ctx.Err() != nil {
			return -1, fmt.Errorf("move region %d: requests still in flight: %w", r.id, ctx.Err())
		}
		time.Sleep(d)
	}
	r.unpinHost() // the registration would stay with the old pages; a device copy pins the new ones again
	fd, err := unix.MemfdCreate("rdmamgr-region", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	// pwrite: the kernel allocates and fills the pages in one call (no
	// page faults of a mapping to copy through).
	for done := 0; err == nil && done < len(mem); {
		var n int
		n, err = unix.Pwrite(fd, mem[done:], int64(done))
		done += n
	}
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("copy region %d into a memfd: %w", r.id, err)
	}
	if _, err := unix.MmapPtr(fd, 0, unsafe.Pointer(&mem[0]), uintptr(len(mem)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("map region %d's pages anew: %w", r.id, err)
	}
	return fd, nil
}

// sealExport seals a memfd before it leaves the process: against writes
// through any new mapping or fd when the region is read-only (the owner's
// mapping keeps writing), and against further seals.
func sealExport(fd int, access buffer.Access) error {
	seals := unix.F_SEAL_SEAL
	if !access.Allows(buffer.AccessWrite) {
		seals |= unix.F_SEAL_FUTURE_WRITE
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fmt.Errorf("seal an exported memfd: %w", err)
	}
	return nil
}

// unexport ends other processes' access to r's memory through the kernel
// (Revoke): if an fd of its private memfd was handed out, r's bytes move
// to a fresh memfd mapped at the same address, and the old one, which
// the other processes may still map, no longer holds r's memory. It waits
// for r's requests (new ones wait) until ctx ends.
func (g *Registry) unexport(ctx context.Context, r *Region) error {
	e := &r.exp
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.passed {
		return nil
	}
	fd, err := g.move(ctx, r, e.mem)
	if err != nil {
		return err
	}
	unix.Close(e.fd)
	if r.slab == nil {
		r.fd = fd
	}
	e.fd, e.passed = fd, false
	return nil
}
