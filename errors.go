package rdmamgr

import (
	"context"
	"errors"
)

// The sentinel errors of rdmamgr, one per meaning. Errors are wrapped with
// context on the way up (and a remote peer's answer carries the sentinel
// of its wire code), so compare with errors.Is, never with ==.
var (
	// ErrBadKey: the key does not match the region's key.
	ErrBadKey = errors.New("bad key")
	// ErrOutOfRange: an offset or length outside the buffer, overflow
	// included.
	ErrOutOfRange = errors.New("out of range")
	// ErrAccess: the buffer does not allow the operation (a Put on a
	// read-only buffer, a Get on a write-only one).
	ErrAccess = errors.New("access denied")
	// ErrReleased: the buffer, region or queue pair was released, or never
	// existed. A remote owner answers a wrong key the same way, so an error
	// from a remote owner matches ErrBadKey too.
	ErrReleased = errors.New("released or unknown")
	// ErrInvalid: a malformed handle or argument (a zero length, an unknown
	// access bit, a handle of another manager where a local one is needed).
	ErrInvalid = errors.New("invalid argument")
	// ErrLimit: a limit was hit: a cap of the registry (registered bytes,
	// regions, one region), of remote peers (bytes, buffers per peer), of
	// routes or handshakes, or of the data path (in flight, frame size).
	// The error's text names the flag that sets the cap.
	ErrLimit = errors.New("limit exceeded")
	// ErrExpired: the buffer's lease ran out, on the owner's clock.
	ErrExpired = errors.New("lease expired")
	// ErrRevoked: the owner revoked remote access to the buffer.
	ErrRevoked = errors.New("revoked")
	// ErrClosed: the manager, its registry, a backend or a route is closed.
	ErrClosed = errors.New("closed")

	// ErrWrongPeer: the remote buffer is not owned by the queue pair's peer.
	ErrWrongPeer = errors.New("buffer not owned by the peer")
	// ErrLengthMismatch: the local and the remote buffer of a Put or Get
	// differ in length.
	ErrLengthMismatch = errors.New("local and remote lengths differ")
	// ErrNotLocal: the call needs what belongs to this process: a queue
	// pair is handed only to a caller in the manager's process, and a Put
	// or Get's local buffer must be owned by the queue pair's manager. It
	// comes with ErrInvalid.
	ErrNotLocal = errors.New("not local")

	// ErrPeerGone: the peer closed the route or died; the route is over
	// (request a new queue pair).
	ErrPeerGone = errors.New("peer gone")
	// ErrDeadline: an operation missed its deadline. It also matches
	// context.DeadlineExceeded, so one check serves whichever layer noticed
	// the deadline: the backend, or the caller's context.
	ErrDeadline error = deadlineError{}
	// ErrProtocol: a malformed frame or handshake.
	ErrProtocol = errors.New("protocol error")
	// ErrUnauthenticated: a peer without the deployment's secret, or a bad,
	// expired or reused route token or handshake.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrVersion: the peer speaks another protocol version.
	ErrVersion = errors.New("version mismatch")
	// ErrNotSupported: the backend is not available in this build or on
	// this machine.
	ErrNotSupported = errors.New("not supported")
	// ErrNotStarted: a backend was asked for a route before Start.
	ErrNotStarted = errors.New("backend not started")

	// ErrUnknownMessage: the manager does not handle the message.
	ErrUnknownMessage = errors.New("unknown message")
	// ErrUnknownPeer: the peer manager could not be reached or named (a
	// name no member of the cluster has, too).
	ErrUnknownPeer = errors.New("unknown or unreachable peer")
	// ErrUnreachableReply: a request would name a reply address the peer
	// cannot reach (loopback toward another host): it would only time out.
	ErrUnreachableReply = errors.New("reply address unreachable from the peer")
	// ErrTimeout: no answer from the manager in time.
	ErrTimeout = errors.New("request timed out")
	// ErrMessageTooLarge: a control message over the configured gRPC limit.
	ErrMessageTooLarge = errors.New("message too large")
	// ErrNoReceive: nobody receives what a peer sent: no receive buffer is
	// posted for a Send, or nobody subscribed to events for a PutWithImm
	// (whose bytes did land). Both sides see it.
	ErrNoReceive = errors.New("no receive posted")
	// ErrReceiveTooSmall: a Send's message is larger than the receive
	// buffer posted next (which stays posted). Both sides see it.
	ErrReceiveTooSmall = errors.New("message larger than the receive buffer")
	// ErrMisaligned: an atomic on a word that is not 8-byte aligned, or not
	// 8 bytes long.
	ErrMisaligned = errors.New("misaligned atomic")
	// ErrBadResponse: a control reply of the wrong type or shape.
	ErrBadResponse = errors.New("bad response")
)

// deadlineError is ErrDeadline: errors.Is matches it and
// context.DeadlineExceeded, and it is a net.Error-style timeout.
type deadlineError struct{}

func (deadlineError) Error() string        { return "deadline exceeded" }
func (deadlineError) Is(target error) bool { return target == context.DeadlineExceeded }
func (deadlineError) Timeout() bool        { return true }
func (deadlineError) Temporary() bool      { return true }
