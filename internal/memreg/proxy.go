package memreg

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Gate admits the users of a proxy region's memory (RegisterProxy): memory
// this registry does not own, whose owner may cut it at any time. A host
// agent's gate is the state-table slot of the region it mapped from an
// attached process (package backend/shm's MapProxy).
//
// Enter is called by AcquireRemote and AcquireLocal of the proxy after
// their own checks; it returns nil when the memory may be used (then
// exactly one Leave follows, at the Ref's Release), else why not: the bare
// sentinel (ErrRevoked, ErrReleased, ErrExpired, ErrPeerGone), which the
// acquire returns as is. Neither may block or allocate: they are on the
// data path.
type Gate interface {
	Enter() error
	Leave()
}

// GateCloser is a Gate told when its proxy region is freed (released, and
// every Ref of it released): Close may let the memory go (unmap it). It is
// called exactly once, after the last Leave.
type GateCloser interface {
	Gate
	Close()
}

// KindProxy: memory another process owns (a host agent's mapping of an
// attached process's region), registered in place behind a Gate.
const KindProxy Kind = KindUser + 1

// RegisterProxy registers mem, memory this registry does not own, as a
// proxy region with the given access, behind gate (which must not be
// nil). The region has its own id and key, like any other; AcquireRemote
// and AcquireLocal of it call gate.Enter after their own checks (region,
// key, access, bounds, revocation, lease), and the Ref's Release calls
// gate.Leave. A proxy is never pooled, never in the registration cache,
// never exported (Ref.ExportFD and Region.Memfd refuse it), and nothing is
// pinned (the memory is not on the Go heap). Revoke and Release of it work
// as for any region: they cut it (Cutters) and wait for its Refs; once it
// is freed, a GateCloser's Close is called. It counts against Limits like
// any registration.
func (g *Registry) RegisterProxy(mem []byte, access buffer.Access, gate Gate) (buffer.Buffer, error) {
	if len(mem) == 0 {
		return buffer.Buffer{}, fmt.Errorf("register empty proxy: %w", rdmamgr.ErrInvalid)
	}
	if gate == nil {
		return buffer.Buffer{}, fmt.Errorf("register proxy without a gate: %w", rdmamgr.ErrInvalid)
	}
	if !access.Valid() {
		return buffer.Buffer{}, fmt.Errorf("register proxy with access %#x: %w", uint32(access), rdmamgr.ErrInvalid)
	}
	if err := g.reserve(uint64(len(mem))); err != nil {
		return buffer.Buffer{}, err
	}
	r, err := g.add(&Region{kind: KindProxy, mem: mem, access: access, fd: -1, gate: gate})
	if err != nil {
		g.unreserve(uint64(len(mem)))
		return buffer.Buffer{}, err
	}
	return g.handle(r), nil
}

// ProxyGate returns the gate of a proxy region (RegisterProxy), nil for any
// other region. An RDMA backend's hook holds it (one Enter when it
// registers the proxy's memory with its device, the Leave once that
// registration is gone): the device's accesses take no Ref, and the
// owner's cut must wait for them as for the Refs'.
func (r *Region) ProxyGate() Gate { return r.gate }
