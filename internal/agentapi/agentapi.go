// Package agentapi is the seam between a host agent (issue 26) and the
// backends that serve its peers: what an agent gives a backend so that
// frames naming an attached process (a WorkRequest's Via) are served in
// that process's memory.
//
// An agent maps the regions of the processes attached to it into its own
// registry as proxy regions (memreg.RegisterProxy). A frame from a peer
// agent names the target process by its slot at this agent (via) and the
// region and key as the process registered them; the backend asks the
// Resolver for the proxy region that stands for them, then serves the
// frame on the proxy as on any region of its registry (memreg.AcquireRemote:
// key, access, bounds, lease, revocation; cuts; sinks). Events and
// messages for the process go to its Inbox.
//
// The TCP and ibverbs backends take a Resolver through wiring.SetResolver
// (whose setters packages backend/tcp and backend/ibverbs add); a backend
// without one refuses frames with a via with rdmamgr.ErrNotSupported.
//
// On ibverbs the initiating agent moves the bytes itself (RDMA READ,
// WRITE, atomics on the proxy's memory region in the far agent's
// protection domain), so it first asks the far agent, over the route,
// for the (address, rkey) of the proxy that Resolve gives, and caches
// the answer per (via, region, key) on that route (see package
// backend/ibverbs, "Host agents"). The device checks rkey, bounds and
// access. Before a proxy revoked or released at the far end loses its
// rkey, the far agent's backend invalidates it on every route that
// resolved it and waits (bounded, 2 s) for each initiator to drop it and
// drain its operations on it, so the shared route goes on; only after
// that give-up can an operation meet the dead rkey: it fails with
// ErrStaleProxy (and the route with it: an RC queue pair does not
// survive a remote access error). So the agent's revoke or release of a
// proxy may wait up to that long; a Resolve must not revoke or release
// a proxy itself and wait for it (the route's worker serving it is what
// the initiators' in-flight PutWithImm and Sends wait on).
//
// Contract for the agent:
//   - A backend may reuse a resolution for later frames of the same (via,
//     region, key) on a connection, whatever their need, for as long as
//     the proxy region admits them (memreg.AcquireRemote with the frame's
//     need succeeds), without calling Resolve again: a proxy must admit no
//     more access than the process's key grants. To end a process's access, revoke or release its proxies (as
//     on a cut notice or the process's death); refusing Resolve alone
//     stops only new resolutions. A proxy that no longer admits a frame
//     (released, revoked, past its lease) makes the backend Resolve again.
//   - Resolve and Inbox run on a connection's goroutine (TCP; on ibverbs,
//     the worker of the route's accepted queue pair): while one waits,
//     that connection serves nothing. Resolve must honour ctx (it ends
//     within ResolveTimeout, and when the backend closes; Close waits for
//     it). The calling connection holds no memreg reference while it
//     calls Resolve (its batch of answers is flushed first), so a Resolve
//     that waits on the process does not hold up a Revoke on this
//     connection's account; other connections serve on meanwhile.
//   - Inbox(via) must return an inbox that does not block (backend.Inbox).
//     An event names the process's own region id (the frame's, not the
//     proxy's) and the origin as its Peer. An inbox that must wait for
//     its process implements AsyncInbox (and its landings AsyncLanding):
//     the backend then answers the frame once the process did, serving
//     the connection's next frames meanwhile; answers may come in another
//     order than their frames (a write-imm's or send's answer names it).
package agentapi

import (
	"context"
	"errors"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// ErrStaleProxy marks the failure of an operation with a Via, on an RDMA
// route, whose cached resolution had gone stale at the far agent: the
// device refused the proxy's rkey (a remote access error) after every
// local check passed, so the proxy was revoked or released there (a cut,
// the process's death, a re-mapping) without the initiator's ack of its
// invalidate (the far agent gave up waiting). The error wraps rdmamgr.ErrAccess
// too. The route failed with it (RC); posting the operation once more, on
// a fresh route, resolves again and answers what the far agent's Resolver
// says (rdmamgr.ErrRevoked, ErrReleased, ErrPeerGone, ...), or succeeds on
// a re-mapped region. The far device refused the work request that met
// the dead rkey: none of its bytes moved after the cut.
var ErrStaleProxy = errors.New("agentapi: the far agent's proxy is gone (resolve again)")

// ResolveTimeout bounds one Resolve: the backend calls it with a context
// that ends at most this long after the call (and when the backend or the
// connection closes). It exceeds shm's bound on an owner's answer to a map
// request (5 s) by more than the TCP backend's reuse of a resolve context
// (up to 1 s older), so a process that leaves its agent's map request
// unanswered is found silent (its shm route fails and the agent ends it)
// before the resolve gives up; with equal bounds the two raced, and a
// resolve that ended first left the stuck process attached.
const ResolveTimeout = 7 * time.Second

// Resolver is an agent's view of the processes attached to it. Its methods
// run on a backend's data path, on the goroutine that serves one
// connection: while one waits, that connection serves nothing else.
type Resolver interface {
	// Resolve maps a frame's (via, region, key) to a proxy region of the
	// agent's own registry that admits need; first use may map it
	// (bounded: ctx, at most ResolveTimeout). local and localKey name the
	// proxy in the agent's registry. An error refuses the frame with its
	// code (errors.Is with the module's sentinels: ErrBadKey, ErrReleased,
	// ErrRevoked, ErrAccess, ErrPeerGone for a slot with no live process,
	// ...); the connection serves on.
	Resolve(ctx context.Context, via uint16, region uint64, key buffer.Key, need buffer.Access) (local uint64, localKey buffer.Key, err error)
	// Inbox is the inbox of the process at via (events and messages for
	// it). An error refuses the event or message with its code.
	Inbox(via uint16) (backend.Inbox, error)
}

// CheckedLanding is a backend.Landing whose message can still be refused
// once its bytes are in: an agent's Inbox stages a message for an attached
// process and hands it on, and the process may have no receive posted.
// The backend calls Deliver instead of Done(n, imm, hasImm, nil) and
// answers the sender with its error (nil: delivered); a failed transfer
// still calls Done with its error. Deliver may wait (the process's answer,
// bounded): the connection serves nothing else meanwhile, which keeps its
// messages in order.
type CheckedLanding interface {
	backend.Landing
	Deliver(n int, imm uint32, hasImm bool) error
}

// FarAgent is implemented by routes whose handshake tells whether the far
// end is a host agent (the TCP backend's: the responder says so in its
// route answer when it is an agent answering an agent). A host agent
// drops a route to a far agent address whose route says it is not one.
type FarAgent interface {
	// FarIsAgent reports whether the responder said it is a host agent.
	FarIsAgent() bool
}

// AsyncInbox is an Inbox (from Resolver.Inbox) that hands events on
// without holding up the connection: the backend answers the write-imm
// once answer is called, and serves the connection's next frames
// meanwhile. An agent's inbox queues an event for its process (bounded:
// a full queue refuses at once with rdmamgr.ErrLimit, as a full
// subscriber queue does on the direct path) and answers with the
// process's answer.
type AsyncInbox interface {
	// EventAsync hands ev on. nil: answer is called exactly once, later
	// or before EventAsync returns, from any goroutine, with the refusal
	// (nil: delivered); it does not block. An error refuses ev at once
	// (answer is never called).
	EventAsync(ev backend.Event, answer func(error)) error
}

// AsyncLanding is a CheckedLanding whose delivery is answered later, as
// AsyncInbox's events are: the backend answers the send once answer is
// called, and serves the connection's next frames meanwhile.
type AsyncLanding interface {
	CheckedLanding
	// DeliverAsync hands the message on (n bytes of Mem, the immediate).
	// nil: answer is called exactly once, as for EventAsync. An error
	// refuses it at once (answer is never called).
	DeliverAsync(n int, imm uint32, hasImm bool, answer func(error)) error
}
