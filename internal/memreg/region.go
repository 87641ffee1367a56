package memreg

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/refgate"
)

// Kind tells where a region's memory came from.
type Kind uint8

const (
	// KindAllocated: memfd-backed memory owned by the registry: a slot of
	// a slab (pooled) or a memfd of its own.
	KindAllocated Kind = iota + 1
	// KindUser: a caller's []byte, pinned while registered.
	KindUser
)

// Region is one registered memory region.
type Region struct {
	id     uint64
	key    buffer.Key
	access buffer.Access
	kind   Kind
	mem    []byte // never moves while registered; nil for device memory
	size   uint64 // the region's length (len(mem) for host memory)
	// dev is the device memory of a KindDevice region (device.go).
	dev *deviceMem

	// KindAllocated memory: the memfd and the offset of mem in it. A
	// pooled region's fd is its slab's; an unpooled one's is its own, and
	// mapping is its whole page-rounded mapping, kept for reuse or unmapped
	// by free (owned.go).
	fd       int
	fdOff    uint64
	slab     *Slab
	mapping  []byte
	exported atomic.Bool // Memfd was called or ExportFD sealed it: the fd may have left the process; never a spare
	// quarantined: a peer may still write the memory after the region is
	// freed (Quarantine); it is never handed to another region.
	quarantined atomic.Bool
	// exp is the private memfd of an exported region (export.go); moving
	// is set while its pages move (new references wait).
	exp    exportState
	moving atomic.Bool

	// holds counts the Registers that share this region through the
	// registration cache (KindUser; 1 otherwise). Guarded by Registry.mu.
	holds int

	// refs counts the references (Refs) held on the region and is closed
	// once its release started; the region is freed when it drains.
	// Lock-free: it is on the data path.
	refs refgate.Gate

	// remote counts the references taken for remote requests
	// (AcquireRemote); Revoke waits for it to reach zero.
	remote atomic.Int64
	// revoked stops remote requests; local use goes on.
	revoked atomic.Bool
	// lease is the expiry of remote access on the registry's monotonic
	// clock (nanoseconds since the registry was made); 0 means no lease.
	lease atomic.Int64

	pinner runtime.Pinner // KindUser only; touched by Registry under its lock
	// pin is the region's registration with the CUDA driver, made on a
	// data path's first device copy (hostpin.go).
	pin hostPin

	// gate admits the users of a proxy region (KindProxy; nil otherwise):
	// every Ref of it entered the gate. Written once before the region is
	// visible.
	gate Gate

	// BackendData is set by a backend's Register hook (for example an
	// ibverbs memory region) and read by the same backend. Written once
	// before the region is visible to other goroutines.
	BackendData any
	// RDMA is what an RDMA backend's Register hook advertises for the
	// region: its virtual address and remote key. Zero when no RDMA backend
	// registered it. Written once before the region is visible.
	RDMA buffer.RDMAKey
}

// ID returns the region id.
func (r *Region) ID() uint64 { return r.id }

// Key returns the region key.
func (r *Region) Key() buffer.Key { return r.key }

// Access returns what remote peers may do with the region.
func (r *Region) Access() buffer.Access { return r.access }

// Kind returns where the memory came from.
func (r *Region) Kind() Kind { return r.kind }

// Len returns the region length.
func (r *Region) Len() int { return int(r.size) }

// Mem returns the region's memory (nil for device memory: see Device).
// Only valid while the caller holds a
// Ref on the region or is the backend hook that registers it.
func (r *Region) Mem() []byte { return r.mem }

// Revoked reports whether remote access was revoked.
func (r *Region) Revoked() bool { return r.revoked.Load() }

// Memfd returns the memfd that holds the region's memory and the offset of
// the region in it, for a backend that passes the fd to another process on
// the host (SCM_RIGHTS); ok is false for caller memory (KindUser). The fd
// stays open while the region is registered (the registry closes it after
// the region is freed); a receiver dups it. A pooled region's fd is its
// slab's, which holds other regions too (see the package doc). An unpooled
// region's memfd is never reused once Memfd was called. Off Linux there
// are no memfds (memfd_other.go): ok is false for every region.
func (r *Region) Memfd() (fd int, off uint64, ok bool) {
	if r.kind != KindAllocated || r.fd < 0 {
		return -1, 0, false
	}
	r.exported.Store(true)
	return r.fd, r.fdOff, true
}

// Quarantine marks a region whose memory another process may still write
// after its release (a peer stopped or hostile mid-copy, that a backend
// gave up waiting for): when the region is freed, its memory is never
// given to another region. A region exported with Ref.ExportFD needs no
// more (its memfd is never reused); a pooled region's slot stays taken
// (its slab stays mapped) for the life of the process.
func (r *Region) Quarantine() { r.quarantined.Store(true) }

// enter takes a reference unless the region's release started; while the
// region's pages move (export.go) it waits. The reference is counted
// before moving is read, and the mover sets moving before it counts the
// references (both sequentially consistent): either this sees the move or
// the mover sees the reference and waits for it.
func (r *Region) enter() bool {
	for {
		if !r.refs.Enter() {
			return false
		}
		if !r.moving.Load() {
			return true
		}
		r.refs.Leave()
		for r.moving.Load() {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// Slab returns the slab a pooled region was carved from (nil otherwise).
func (r *Region) Slab() *Slab { return r.slab }
