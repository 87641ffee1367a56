package memreg

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Ref is a counted reference to part of a region: while it is held the
// region stays registered and its memory mapped (Release of the region, and
// Revoke for a remote Ref, wait for it). AcquireRemote and AcquireLocal
// hand one out; Release gives it back.
//
// Ref is a small value, so the data path allocates nothing for it. Keep it
// in one variable or field and release it through that one: Release zeroes
// the Ref it is called on, so releasing the same variable again does
// nothing, but releasing two copies of one Ref drops two references (and
// panics if that is more than were taken). A data path that drops many
// at once takes each out with Detach (the region keeps the reference,
// and its Release waits, until LeaveAll drops it).
type Ref struct {
	r      *Region
	mem    []byte // nil for device memory
	remote bool
	off, n uint64 // the referenced range of the region
}

// Bytes returns the referenced memory; valid until Release. It is nil
// for device memory (Device), which only AcquireRemoteAny and
// AcquireLocalAny hand out.
func (f Ref) Bytes() []byte { return f.mem }

// Region returns the referenced region (nil for the zero Ref).
func (f Ref) Region() *Region { return f.r }

// Held reports whether f holds a reference (it is not zero or released).
func (f Ref) Held() bool { return f.r != nil }

// Release drops the reference and zeroes f. Releasing a zero or released
// Ref does nothing.
func (f *Ref) Release() {
	r := f.r
	if r == nil {
		return
	}
	remote := f.remote
	*f = Ref{}
	if r.gate != nil { // a proxy: every Ref of it entered the gate (before refs.Leave, which may free it)
		r.gate.Leave()
	}
	r.refs.Leave() // it panics, changing nothing more, if r holds no reference
	if remote {
		r.remote.Add(-1)
	}
}

// Detach takes the reference out of f and zeroes f, for a caller that
// drops many at once: when f is a local reference to a region that is not
// a proxy (RegisterProxy), it returns that region, and the caller owes it
// the reference: LeaveAll drops it. Otherwise (f zero, remote, a proxy's)
// it returns nil and changes nothing: release f as usual. Unlike
// ReleaseAll's, the caller's copy is a pointer, not the whole Ref.
func (f *Ref) Detach() *Region {
	r := f.r
	if r == nil || f.remote || r.gate != nil {
		return nil
	}
	*f = Ref{}
	return r
}

// AcquireRemote admits a remote peer's request on [off, off+n) of region id
// under key, needing access need (buffer.AccessRead for a Get, AccessWrite
// for a Put), and returns a Ref that keeps the memory registered until its
// Release. The checks run in a fixed order: region, key, access, bounds,
// then revocation and lease, then a proxy's gate (RegisterProxy). Errors are the bare sentinels (ErrReleased,
// ErrBadKey, ErrAccess, ErrOutOfRange, ErrRevoked, ErrExpired): the data
// path answers with their codes and allocates nothing.
//
// A device region (AllocateAt) is refused with ErrNotSupported after the
// bounds: the caller moves host memory only (AcquireRemoteAny does not
// refuse it).
func (g *Registry) AcquireRemote(id uint64, key buffer.Key, off, n uint64, need buffer.Access) (Ref, error) {
	return g.acquireRemote(id, key, off, n, need, false)
}

// AcquireRemoteAny is AcquireRemote for a data path that moves device
// memory too: a device region's Ref has no Bytes, its Device says where
// the memory is.
func (g *Registry) AcquireRemoteAny(id uint64, key buffer.Key, off, n uint64, need buffer.Access) (Ref, error) {
	return g.acquireRemote(id, key, off, n, need, true)
}

func (g *Registry) acquireRemote(id uint64, key buffer.Key, off, n uint64, need buffer.Access, anyLoc bool) (Ref, error) {
	g.mu.RLock()
	r := g.regions[id]
	g.mu.RUnlock()
	if r == nil {
		return Ref{}, rdmamgr.ErrReleased
	}
	if !r.key.Equal(key) {
		return Ref{}, rdmamgr.ErrBadKey
	}
	if need == 0 || !r.access.Allows(need) {
		return Ref{}, rdmamgr.ErrAccess
	}
	if err := buffer.CheckRange(r.size, off, n); err != nil {
		return Ref{}, err
	}
	if r.dev != nil && !anyLoc {
		return Ref{}, rdmamgr.ErrNotSupported
	}
	// Counted before the checks, so Revoke, which sets the flag and then
	// waits for the count, never misses a request.
	r.remote.Add(1)
	if r.revoked.Load() {
		r.remote.Add(-1)
		return Ref{}, rdmamgr.ErrRevoked
	}
	if g.expired(r.lease.Load()) {
		r.remote.Add(-1)
		return Ref{}, rdmamgr.ErrExpired
	}
	if !r.enter() {
		r.remote.Add(-1)
		return Ref{}, rdmamgr.ErrReleased
	}
	if r.gate != nil { // a proxy: its owner's word last
		if err := r.gate.Enter(); err != nil {
			r.refs.Leave()
			r.remote.Add(-1)
			return Ref{}, err
		}
	}
	return Ref{r: r, mem: r.span(off, n), remote: true, off: off, n: n}, nil
}

// AcquireLocal resolves handle b of this registry to its memory for the
// owner's own use (a Put's source, a Get's destination) and returns a Ref
// that keeps it registered until its Release. The owner's use needs no
// access right and outlives revocation and leases; a handle of another
// manager fails with ErrInvalid, then key and bounds are checked, then a
// proxy's gate (RegisterProxy: the owner's cut ends the agent's own use
// too).
func (g *Registry) AcquireLocal(b buffer.Buffer) (Ref, error) { return g.AcquireLocalOf(&b) }

// AcquireLocalOf is AcquireLocal of *b, for a data path that keeps its
// handles where they are (a Buffer is over 100 bytes); b is only read.
// A device region is refused with ErrNotSupported (AcquireLocalAny
// does not refuse it).
func (g *Registry) AcquireLocalOf(b *buffer.Buffer) (Ref, error) { return g.acquireLocal(b, false) }

// AcquireLocalAny is AcquireLocalOf for a data path that moves device
// memory too (Ref.Device).
func (g *Registry) AcquireLocalAny(b *buffer.Buffer) (Ref, error) { return g.acquireLocal(b, true) }

func (g *Registry) acquireLocal(b *buffer.Buffer, anyLoc bool) (Ref, error) {
	if b.OwnerID != g.ownerID {
		return Ref{}, fmt.Errorf("%v is not owned by manager %016x: %w", *b, g.ownerID, rdmamgr.ErrInvalid)
	}
	g.mu.RLock()
	r := g.regions[b.Region]
	g.mu.RUnlock()
	var err error
	switch {
	case r == nil:
		err = rdmamgr.ErrReleased
	case !r.key.Equal(b.Key):
		err = rdmamgr.ErrBadKey
	default:
		err = buffer.CheckRange(r.size, b.Offset, b.Length)
	}
	if err == nil && r.dev != nil && !anyLoc {
		err = errDevice
	}
	if err == nil && !r.enter() {
		err = rdmamgr.ErrReleased
	}
	if err == nil && r.gate != nil { // a proxy: its owner's word last
		if err = r.gate.Enter(); err != nil {
			r.refs.Leave()
		}
	}
	if err != nil {
		return Ref{}, fmt.Errorf("local %v: %w", *b, err)
	}
	return Ref{r: r, mem: r.span(b.Offset, b.Length), off: b.Offset, n: b.Length}, nil
}

// span is [off, off+n) of r's host memory (nil for device memory).
func (r *Region) span(off, n uint64) []byte {
	if r.mem == nil {
		return nil
	}
	return r.mem[off : off+n : off+n]
}

// Bytes returns the memory of a local handle without holding a reference:
// it is for the owner that fills or reads the buffer between transfers.
// The slice is invalid once the buffer is released.
func (g *Registry) Bytes(b buffer.Buffer) ([]byte, error) {
	ref, err := g.AcquireLocal(b)
	if err != nil {
		return nil, err
	}
	mem := ref.Bytes()
	ref.Release()
	return mem, nil
}
