package wiring

import (
	"context"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// The host agent's seams into package backend/shm (issue 26, AGENT.md
// part 1). The agent is an shm initiator of each attached process; the
// process is the owner of the regions the agent maps.
//
// The agent's side, per attached process:
//
//	pending, info, _ := agentSHM.PrepareRoute(ctx, procID) // info to the process
//	rt, _ := pending.Complete(ctx, answer)                  // the process's answer
//	pr := rt.(wiring.ProxyRoute)
//	pr.OnCut(func(region uint64) { go revokeProxiesOf(region) }) // never block here
//	mem, gate, err := pr.MapProxy(ctx, region, key, need)
//	h, err := agentReg.RegisterProxy(mem, gate.(wiring.ProxyGate).Access(), gate)
//	// serve and post on h; agentReg.Release(ctx, h) when done (frees the mapping)
//
// The process's side: wiring.SHMAcceptAgentRoute(procSHM, ctx, agentID,
// info) instead of procSHM.AcceptRoute.

// ProxyRoute is what an shm route the agent initiated offers it: the
// backend.Route that shm's PendingRoute.Complete returns implements it
// (reach it by a type assertion).
type ProxyRoute interface {
	// MapProxy maps the owner's whole region (once per route, cached like
	// any mapping; the owner checks key, access, revocation and lease as
	// for any map request) and returns its memory and a Gate over its
	// state-table slot, for memreg.Registry.RegisterProxy. Enter counts a
	// user into the slot, then checks the region still alive and its lease
	// (on the coarse clock), else it un-counts and returns the bare
	// sentinel (ErrRevoked, ErrReleased, ErrExpired; ErrPeerGone once the
	// route ended); Leave un-counts. The owner's Revoke and Release wait
	// for the count as for a copy's. The gate is a ProxyGate: its Close
	// (memreg calls it when the proxy region is freed) lets the mapping
	// go; until then mem stays mapped, even after the route closed, and
	// the region is never evicted from the route's mappings. Register the
	// proxy with at most the gate's Access (mem is mapped read-only when
	// the region grants no write). Each call returns a new gate; register
	// it once. Errors: the owner's refusal (ErrBadKey, ErrReleased,
	// ErrAccess, ErrRevoked, ErrExpired), ErrNotSupported (not
	// memfd-backed, or write-only: the owner does not export it),
	// ErrPeerGone, or ctx's.
	MapProxy(ctx context.Context, region uint64, key buffer.Key, need buffer.Access) (mem []byte, gate memreg.Gate, err error)
	// Notify tells the owner that a PutWithImm landed in a region this
	// route proxies (the agent wrote [off, off+n) itself): a msgEvent
	// without a copy, delivered to the owner's Inbox with Peer = origin
	// (0: the agent's own id). It waits for the owner's answer (ctx and 5 s
	// bound it) and returns its refusal (ErrNoReceive, ErrLimit,
	// ErrAccess, ErrOutOfRange, ErrReleased...); ErrReleased at once when
	// no proxy of region is open on this route. Sends and PutWithImm with
	// a copy go through Post as usual, with WorkRequest.Origin.
	Notify(ctx context.Context, region uint64, off, n uint64, imm uint32, origin uint64) error
	// OnCut sets the function called with a proxied region's id when the
	// owner cuts it (its cut notice, sent before the owner waits for the
	// region's users: revoke the proxy then, which ends the Refs in flight
	// and lets the owner's Revoke return at once), and for every proxied
	// region when the route ends. It runs on the route's reader goroutine:
	// it must not block (start the revocation elsewhere). It may be called
	// more than once for a region. Set it before the first MapProxy.
	OnCut(f func(region uint64))
}

// ProxyGate is the gate MapProxy returns.
type ProxyGate interface {
	memreg.GateCloser
	// Access is what the owner's region grants.
	Access() buffer.Access
}

// SHMAcceptAgentRoute is (*shm.Backend).AcceptRoute for the route of this
// process's own host agent (the attach handshake's shmAccept): the owner's
// connection of that route is marked as its agent's. Only from such a
// connection is an origin manager id on an event or a message (the
// process the agent posts it for) honoured as the Inbox's Peer (from any
// other it is refused with ErrUnauthenticated), and only such a
// connection gets cut notices. Set by package backend/shm; b is its
// *Backend.
var SHMAcceptAgentRoute func(b any, ctx context.Context, peerID uint64, info []byte) ([]byte, error)
