// Package rdmamgr holds the error sentinels of the rdmamgr module: one per
// meaning, in one place. Every package of the module reports its failures
// with these (wrapped with context), and a failure that crossed the wire
// comes back as the same sentinel, so one errors.Is works whichever side or
// layer found the fault. It imports nothing of the module.
//
// # Where things are
//
// A program uses four packages: actor (the manager and its typed client:
// RequestBuffer, RequestQueuePair, leases, status), buffer (Buffer handles:
// slice them, send them as protobuf, check them with FromProto), queuepair
// (Put, Get, Submit and their work requests; its doc states what
// "reported means finished" promises) and this one for errors. The backend
// packages (backend, backend/tcp, backend/ibverbs) are the data planes the
// manager drives; a program meets them only for backend.LoadSecret and
// their configuration.
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
// Some packages refine a sentinel with an error of their own that wraps
// it: backend/tcp.ErrListenerDown is ErrClosed, backend/ibverbs.ErrNotBuilt
// and ErrNoDevices are ErrNotSupported. The older per-package names
// (rdmamgr.ErrBadKey, rdmamgr.ErrPeerGone, rdmamgr.ErrWrongPeer,
// rdmamgr.ErrNotLocal, remoteguard.ErrTooManyConns (ErrLimit),
// rdmamgr.ErrUnknownPeer (ErrUnknownPeer), ...) are the same values as the
// ones here and keep working with errors.Is.
package rdmamgr
