// Package rdmamgr is an RDMA resource manager for Go programs: a manager
// per endpoint hands out Buffers (handles to registered memory that any
// actor in any process may hold) and QueuePairs to peer managers, over
// shared memory, RDMA (ibverbs) or TCP. Start with package node: node.Start
// brings up a whole endpoint (actor system, control plane, data planes,
// manager) from one node.Config, and its Client requests buffers and queue
// pairs. This package holds the module's error sentinels, one per meaning.
//
// # Where things are
//
// The packages a program uses:
//
//   - node: the entry point; Start assembles an endpoint, Close ends it,
//     Client and ClientOf give typed clients of managers.
//   - actor: the manager and its typed Client (RequestBuffer,
//     RequestQueuePair, leases, revocation, status), the receiving side of
//     PutWithImm and Send (SubscribeEvents, SubscribeMessages, PostRecv).
//   - buffer: the Buffer handle (slice it, send it as protobuf, check it
//     with FromProto) and its access bits.
//   - queuepair: Put, Get, the other verbs and Submit, their work requests,
//     and what "reported means finished" promises.
//   - rdmamgr (this package): the error sentinels.
//
// What a program meets for configuration or detail:
//
//   - backend: the data-plane interface, backend.LoadSecret, the kinds.
//   - backend/tcp, backend/shm, backend/ibverbs: the data planes' Config
//     (node.Config's TCP, SHM and IBVerbs) and their refined errors.
//   - backend/agent: the route through the host's agent (node.Config.Agent:
//     a process attached to `rdmamgr serve --agent-socket` reaches processes
//     of other hosts through the agents' shared routes).
//   - remoteguard: the hardened gRPC endpoint of the control plane
//     (node.Config.Remote).
//   - certs: the deployment's CA and mutual-TLS credentials.
//   - membership: the cluster's members in etcd, by name.
//   - proto: the wire messages (a Buffer's Proto form, status).
//   - bench, bench/baseline: the engines of `rdmamgr bench` and its
//     plain-TCP baseline.
//
// The command is cmd/rdmamgr (serve, status, bench, certificates); the
// examples are examples/readme (the README's program) and
// examples/rendezvous (the verbs beyond Put and Get).
//
// Every package of the module reports its failures with the sentinels
// here (wrapped with context), and a failure that crossed the wire comes
// back as the same sentinel, so one errors.Is works whichever side or
// layer found the fault. This package imports nothing of the module.
//
// # Errors
//
// Buffers and their memory:
//
//   - ErrBadKey: the key does not match the region's.
//   - ErrOutOfRange: an offset or length outside the buffer.
//   - ErrAccess: the buffer does not allow the operation.
//   - ErrReleased: the buffer, region or queue pair was released (or never
//     existed); a remote owner answers a wrong key the same way.
//   - ErrInvalid: a malformed handle or argument.
//   - ErrLimit: a cap was hit (the text names the flag that sets it).
//   - ErrExpired: the buffer's lease ran out, on the owner's clock.
//   - ErrRevoked: the owner revoked remote access.
//   - ErrClosed: the manager, its registry, a backend or a route is closed.
//
// Queue pairs:
//
//   - ErrWrongPeer: the remote buffer is not owned by the queue pair's peer.
//   - ErrLengthMismatch: local and remote buffers differ in length.
//   - ErrNotLocal: a queue pair for a caller outside the manager's process,
//     or a local buffer the queue pair's manager does not own.
//
// The data path (any backend):
//
//   - ErrPeerGone: the peer closed the route or died.
//   - ErrDeadline: an operation missed its deadline; it matches
//     context.DeadlineExceeded too.
//   - ErrProtocol: a malformed frame or handshake.
//   - ErrUnauthenticated: a bad secret, route token or handshake.
//   - ErrVersion: the peer speaks another protocol version.
//   - ErrNotSupported: the backend is not available here.
//   - ErrNotStarted: a route asked of a backend before Start.
//
// The control plane (the manager's actor):
//
//   - ErrUnknownMessage: the manager does not handle the message.
//   - ErrUnknownPeer: the peer could not be reached, or no member of the
//     cluster has its name.
//   - ErrUnreachableReply: our reply address is one the peer cannot reach.
//   - ErrTimeout: no answer in time.
//   - ErrMessageTooLarge: a message over the gRPC limit.
//   - ErrBadResponse: a reply of the wrong type or shape.
//
// The receiving side and atomics:
//
//   - ErrNoReceive: nobody receives what a peer sent (no receive buffer
//     posted for a Send, no subscriber for a PutWithImm's event).
//   - ErrReceiveTooSmall: a Send larger than the receive buffer posted
//     next.
//   - ErrMisaligned: an atomic on a word that is not one 8-byte aligned
//     word.
//
// Each sentinel has this one name. Some packages refine one with an error
// of their own that wraps it: backend/tcp.ErrListenerDown is ErrClosed;
// backend/shm.ErrNotSameHost and ErrNotBuilt, backend/ibverbs.ErrNotBuilt
// and ErrNoDevices are ErrNotSupported.
package rdmamgr
