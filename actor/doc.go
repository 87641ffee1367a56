// Package actor implements the RdmaManager actor and the typed client that
// talks to it.
//
// A Manager owns one endpoint's memory registrations (its registry),
// the data-plane backends it is given and the routes to peer managers. Its
// actor answers RequestBuffer, ReleaseBuffer, RenewLease, RevokeBuffer,
// RequestQueuePair, ReleaseQueuePair, the manager-to-manager
// RouteHandshake, StatusRequest and Ping, locally or across processes
// through protoactor remote, one handler per message (receive.go). Any
// other message gets an ErrorReply with code UNKNOWN_MESSAGE; nothing a
// peer sends can crash it.
//
// The package knows backends only by the backend.Backend interface:
// package node, the one assembler, builds the backends over the manager's
// registry and hands them to Start as Choices (actor system, hardened
// protoactor remote, backends, manager, and one Close for all of them).
// Programs use node.Start, and this package's Client and Manager.
//
// One route is cached per peer manager: concurrent RequestQueuePair calls for
// the same peer share one setup, and a failed route is rebuilt by the next
// request. A route outlives its last queue pair for Config.RouteLinger (30 s
// by default), so that queue-pair churn reuses it; then it closes. A setup tries the backends in order of preference and takes the
// first that connects; a backend that refuses the peer with
// ErrNotSupported (shm for a peer on another host, one the peer does not
// run) passes the turn. The route keeps why it runs on its backend (the
// backends passed over and their reasons, including those the assembler
// left out: Start's Choices), logs it at "route up" and shows it in status;
// the responder's inbound route names the handshakes it refused on the
// way (choice.go). Queue pairs are handed only to callers in the manager's own
// process (their memory is local); Put and Get then go from the caller's
// goroutine to the backend, never through a mailbox.
//
// The manager is also the receiving side of PutWithImm and Send (inbox.go,
// subscribe.go): it gives its backends an inbox (backend.InboxUser), and a
// program subscribes with SubscribeEvents and SubscribeMessages and posts
// receive buffers with PostRecv. Queues are bounded: when one is full the
// initiator's operation is refused with ErrLimit (counted,
// InboxRefused), never dropped silently; with nobody to receive it is
// refused with ErrNoReceive, and a message larger than the next posted
// buffer with ErrReceiveTooSmall, which the message stream reports too.
// One peer has at most two messages landing at once (a receive buffer
// taken, the payload still arriving, until the backend's deadline):
// a peer that stalls its messages is refused more with ErrLimit, and the
// other peers' messages keep flowing.
//
// Whether a request is local comes from how it arrived, never from its
// sender address: the guard in front of protoactor's gRPC endpoint
// (package remoteguard) stamps every envelope from the network and drops
// those whose sender is forged, so replies go only to the peer itself. The
// manager is bounded by default (limits.go); refusals are counted by
// reason in status and logged sampled, in one book per actor system shared
// with the guard.
//
// Across hosts (docs/multihost.md): callers listen on the local address of
// their route to the peer (ReplyListen); a loopback reply address toward
// another host fails at once with ErrUnreachableReply (every request and
// handshake checks it: addr.go). DropPeer ends the routes to a peer that
// left the cluster (membership).
//
// Contract: New does no I/O; Start spawns the actor and takes ownership of
// the backends; Close is idempotent and waits for every goroutine the
// manager started. PID returns a fresh PID on every call (protoactor caches
// a resolved process inside a PID). Errors returned by the Client wrap the
// sentinels of buffer, backend, queuepair and this package, so callers
// branch with errors.Is whichever process found the fault.
package actor
