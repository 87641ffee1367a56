package memreg

import (
	"runtime"
	"sync/atomic"
	"syscall"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/refgate"
)

// Kind tells where a region's memory came from.
type Kind uint8

const (
	// KindAllocated: anonymous mmap owned by the registry.
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
	mem    []byte // never moves while registered

	mapping []byte // KindAllocated: the whole page-rounded mmap, unmapped by free

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
func (r *Region) Len() int { return len(r.mem) }

// Mem returns the region's memory. Only valid while the caller holds a
// Ref on the region or is the backend hook that registers it.
func (r *Region) Mem() []byte { return r.mem }

// Revoked reports whether remote access was revoked.
func (r *Region) Revoked() bool { return r.revoked.Load() }

func mmapAnon(size int) ([]byte, error) {
	return syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

func munmap(b []byte) error { return syscall.Munmap(b) }
