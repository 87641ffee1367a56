// Package backend defines the interface every data-plane backend implements
// (TCP, ibverbs): the service-provider interface between the manager and
// its data planes. A program posts through package queuepair and needs
// from here only the shared secret (LoadSecret). The package also maps the
// module's error sentinels (package rdmamgr) to wire codes and back (Code,
// Sentinel, RemoteError).
//
// A Backend moves bytes between registered regions of two managers. Setting
// up a route is a two-sided exchange of opaque endpoint info that the
// managers' actors carry for the backend:
//
//	initiator: pr, info := b.PrepareRoute(ctx, peer)      // e.g. create a QP
//	           ---- info (RouteHandshake) ---->
//	responder: respInfo := b.AcceptRoute(ctx, peer, info)  // e.g. QP to RTR/RTS, or a TCP token
//	           <--- respInfo -------------------
//	initiator: route := pr.Complete(ctx, respInfo)         // e.g. QP to RTS, or dial
//
// A Route posts work requests (RDMA WRITE = Put, RDMA READ = Get) that
// complete asynchronously through their Completer. The responder's side
// validates every remote request against its registry (internal/memreg,
// AcquireRemote): key, access, bounds, revocation, lease; a rejected
// request changes nothing at the owner.
//
// Ordering (RC's, route-wide): a PutWithImm's event and a Send's message
// reach the owner's Inbox only after every Put posted before them on the
// route has landed (a Put that failed is waited for only until it is
// reported), and after every atomic posted before them; events and
// messages come in posting order. Conformance: backendtest's
// OrderAfterPuts.
//
// A Route may implement optional interfaces the queue pair on it uses:
// ListPoster (a chain posted at the cost of one post) and SlowCompleter
// (its operations take hundreds of microseconds: waiters park at once
// instead of spinning).
//
// Contract: constructors do no I/O; Start begins it; Close is idempotent and
// waits for the backend's goroutines. A work request is completed exactly
// once, and only after the backend can no longer touch its local memory.
package backend
