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

// moveQuiesce bounds how long promoting a pooled region waits for the
// requests in it to finish (new ones wait while it moves).
const moveQuiesce = 100 * time.Millisecond

// ExportFD returns a new fd (the caller closes it once passed) of a memfd
// that holds exactly the pages of the region f references, the region at
// offset off in it. The fd is read-write when the region allows remote
// writes, else read-only, and a read-only region's memfd is sealed
// against writing (F_SEAL_FUTURE_WRITE), so no reopening gives more. A
// pooled region is moved out of its slab into a memfd of its own first
// (its bytes are copied and its pages remapped at the same address; new
// requests on it wait while it moves). It fails with ErrNotSupported for
// caller memory, a region without read access, a registry whose hooks
// pin memory (an RDMA device holds the pages a move would replace), or
// when the requests in a pooled region do not finish within 100 ms. The
// caller holds f.
func (f Ref) ExportFD(g *Registry) (fd int, off uint64, err error) {
	r := f.r
	if r == nil || r.kind != KindAllocated || !r.access.Allows(buffer.AccessRead) || g.pinsMemory() {
		return -1, 0, errNotExportable
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

// pinsMemory reports whether a hook registers memory with a device (an
// RDMA backend): such pages must not be replaced under it.
func (g *Registry) pinsMemory() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.hooks) > 0
}

// promote gives r a private memfd: an unpooled region's own, sealed; a
// pooled one's slot moved into a fresh one. r.exp.mu is held.
func (g *Registry) promote(r *Region) error {
	e := &r.exp
	if r.slab == nil {
		if err := sealExport(r.fd, r.access); err != nil {
			return err
		}
		e.fd, e.mem, e.off = r.fd, r.mapping, r.fdOff
		return nil
	}
	slot := r.slab.mem[r.fdOff : r.fdOff+r.slab.slot : r.fdOff+r.slab.slot]
	if len(slot)%g.pageSize != 0 || uintptr(unsafe.Pointer(&slot[0]))%uintptr(g.pageSize) != 0 {
		return errNotExportable // a slot that shares a page with another
	}
	fd, err := g.move(r, slot, moveQuiesce, nil, 1)
	if err != nil {
		return err
	}
	// The slab's pages of the slot are no longer anyone's: free them.
	_ = unix.Fallocate(r.slab.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(r.fdOff), int64(len(slot)))
	if err := sealExport(fd, r.access); err != nil {
		unix.Close(fd)
		return err // the slot now lives in fd: give it back at free
	}
	e.fd, e.mem, e.off = fd, slot, 0
	return nil
}

// move copies mem (page aligned, the pages of r) into a fresh memfd and
// maps that memfd over mem, at the same address, so every slice of r
// stays valid and now reaches the new pages. While it runs, new
// references to r wait; it first waits (up to bound, or ctx) until only
// held references remain. It returns the new memfd.
func (g *Registry) move(r *Region, mem []byte, bound time.Duration, ctx context.Context, held int64) (int, error) {
	r.moving.Store(true)
	defer r.moving.Store(false)
	deadline := time.Now().Add(bound)
	for d := 20 * time.Microsecond; r.refs.Users() > held; d = min(2*d, time.Millisecond) {
		if ctx != nil && ctx.Err() != nil {
			return -1, fmt.Errorf("move region %d: requests still in flight: %w", r.id, ctx.Err())
		}
		if ctx == nil && time.Now().After(deadline) {
			return -1, fmt.Errorf("move region %d: requests still in flight: %w", r.id, errNotExportable)
		}
		time.Sleep(d)
	}
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
	fd, err := g.move(r, e.mem, 0, ctx, 0)
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

// freeExported undoes a pooled region's move out of its slab before its
// slot goes back: the slab's (punched, zero) pages are mapped at the slot
// again and the private memfd closed. It reports false if that failed
// (the slot must not be reused).
func (g *Registry) freeExported(r *Region) bool {
	e := &r.exp
	if r.slab == nil || e.mem == nil {
		return true
	}
	_, err := unix.MmapPtr(r.slab.fd, int64(r.fdOff), unsafe.Pointer(&e.mem[0]), uintptr(len(e.mem)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED)
	unix.Close(e.fd)
	e.fd, e.mem = -1, nil
	return err == nil
}
