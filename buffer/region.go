package buffer

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
)

// Kind tells where a region's memory came from.
type Kind uint8

const (
	// KindAllocated: anonymous mmap owned by the registry.
	KindAllocated Kind = iota + 1
	// KindUser: a caller's []byte, pinned while registered.
	KindUser
)

const releasedBit = int64(1) << 62

// Region is one registered memory region.
type Region struct {
	id     uint64
	key    Key
	access Access
	kind   Kind
	mem    []byte // never moves while registered

	mapping []byte // KindAllocated: the whole page-rounded mmap, unmapped by free

	// state holds the count of acquired references in its low bits and
	// releasedBit once Release started. Lock-free: Acquire is on the data path.
	state   atomic.Int64
	drained chan struct{} // closed when released and no references remain
	once    sync.Once

	// remote counts the references taken for remote requests (Acquire
	// with need != 0); Revoke waits for it to reach zero.
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
	RDMA RDMAKey
}

// RDMAKey is the RDMA address and remote key of a region.
type RDMAKey struct {
	Addr uint64 // virtual address of the region's first byte
	RKey uint32 // remote key
}

// ID returns the region id.
func (r *Region) ID() uint64 { return r.id }

// Key returns the region key.
func (r *Region) Key() Key { return r.key }

// Access returns what remote peers may do with the region.
func (r *Region) Access() Access { return r.access }

// Kind returns where the memory came from.
func (r *Region) Kind() Kind { return r.kind }

// Len returns the region length.
func (r *Region) Len() int { return len(r.mem) }

// Mem returns the region's memory. Only valid while the caller holds a
// reference (Acquire) or owns the region's registration.
func (r *Region) Mem() []byte { return r.mem }

// tryRef takes a reference unless the region is being released.
func (r *Region) tryRef() bool {
	for {
		s := r.state.Load()
		if s&releasedBit != 0 {
			return false
		}
		if r.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// UnrefRemote drops a reference taken by Acquire with need != 0 (a remote
// request).
func (r *Region) UnrefRemote() {
	r.remote.Add(-1)
	r.Unref()
}

// Revoked reports whether remote access was revoked.
func (r *Region) Revoked() bool { return r.revoked.Load() }

// Unref drops a reference taken by Acquire with need == 0 (the owner's use).
func (r *Region) Unref() {
	if r.state.Add(-1) == releasedBit {
		r.once.Do(func() { close(r.drained) })
	}
}

// markReleased stops new references; it reports false if already released.
func (r *Region) markReleased() bool {
	for {
		s := r.state.Load()
		if s&releasedBit != 0 {
			return false
		}
		if r.state.CompareAndSwap(s, s|releasedBit) {
			if s == 0 {
				r.once.Do(func() { close(r.drained) })
			}
			return true
		}
	}
}

// Drained is closed once the region is released and unreferenced.
func (r *Region) Drained() <-chan struct{} { return r.drained }

func mmapAnon(size int) ([]byte, error) {
	return syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
}

func munmap(b []byte) error { return syscall.Munmap(b) }
