// Package backend defines the interface every data-plane backend implements
// (TCP, ibverbs) and the error classes shared by the data path.
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
// validates every remote request against its buffer.Registry: key, access,
// bounds; a rejected request changes nothing at the owner.
//
// Contract: constructors do no I/O; Start begins it; Close is idempotent and
// waits for the backend's goroutines. A work request is completed exactly
// once, and only after the backend can no longer touch its local memory.
package backend
