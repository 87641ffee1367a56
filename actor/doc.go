// Package actor implements the RdmaManager actor and the typed client that
// talks to it.
//
// A Manager owns one endpoint's memory registrations (a memreg.Registry),
// one data-plane backend and the routes to peer managers. Its actor answers
// RequestBuffer, ReleaseBuffer, RequestQueuePair, ReleaseQueuePair, the
// manager-to-manager RouteHandshake, StatusRequest and Ping, locally or
// across processes through protoactor remote. Any other message gets an
// ErrorReply with code UNKNOWN_MESSAGE; nothing a peer sends can crash it.
//
// One route is cached per peer manager: concurrent RequestQueuePair calls for
// the same peer share one setup, and a failed route is rebuilt by the next
// request. Queue pairs are handed only to callers in the manager's own
// process (their memory is local); Put and Get then go from the caller's
// goroutine to the backend, never through a mailbox.
//
// Whether a request is local comes from how it arrived, never from its
// sender address: the guard in front of protoactor's gRPC endpoint stamps
// every envelope from the network and drops those whose sender is forged,
// so replies go only to the peer itself (remote_origin.go). The gRPC
// server is bounded (RemoteConfig), and so is the manager by default
// (limits.go); refusals are counted by reason in status and logged sampled.
//
// Across hosts (docs/multihost.md): StartRemote's options run the control
// plane over mutual TLS (WithTLS) and set the advertised host
// (WithAdvertise); a wildcard bind advertises a routable address of the
// host, never the wildcard (advertise.go). Callers listen on the local
// address of their route to the peer (ReplyListen); a loopback reply
// address toward another host fails at once (CheckReply,
// ErrUnreachableReply). DropPeer ends the routes to a peer that left the
// cluster (membership).
//
// Contract: New does no I/O; Start starts the backend and spawns the actor;
// Close is idempotent and waits for every goroutine the manager started.
// Errors returned by the Client wrap the sentinels of buffer, backend,
// queuepair and this package, so callers branch with errors.Is whichever
// process found the fault.
package actor
