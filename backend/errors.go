package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Sentinel errors of the data path; buffer's sentinels (ErrBadKey,
// ErrOutOfRange, ErrAccess, ErrReleased) are used for remote validation
// failures too, so one errors.Is works whichever side found the fault.
var (
	// ErrPeerGone: the peer closed the route or died.
	ErrPeerGone = errors.New("backend: peer gone")
	// ErrDeadline: the work request missed its deadline. It also matches
	// context.DeadlineExceeded (errors.Is), so one check serves whichever
	// layer noticed the deadline: the backend, or the caller's context.
	ErrDeadline error = deadlineError{}
	// ErrClosed: the route or backend is closed.
	ErrClosed = errors.New("backend: closed")
	// ErrProtocol: a malformed frame or handshake.
	ErrProtocol = errors.New("backend: protocol error")
	// ErrUnauthenticated: a bad, expired or reused route token.
	ErrUnauthenticated = errors.New("backend: unauthenticated")
	// ErrVersion: the peer speaks another protocol version.
	ErrVersion = errors.New("backend: version mismatch")
	// ErrNotSupported: the backend is not available in this build or machine.
	ErrNotSupported = errors.New("backend: not supported")
	// ErrLimit: a limit (in-flight, routes, frame size) was hit.
	ErrLimit = errors.New("backend: limit exceeded")
)

// deadlineError is ErrDeadline: errors.Is matches it and
// context.DeadlineExceeded, and it is a net.Error-style timeout.
type deadlineError struct{}

func (deadlineError) Error() string        { return "backend: deadline exceeded" }
func (deadlineError) Is(target error) bool { return target == context.DeadlineExceeded }
func (deadlineError) Timeout() bool        { return true }
func (deadlineError) Temporary() bool      { return true }

// Code maps an error to the wire code; nil is OK.
func Code(err error) rdmapb.Code {
	switch {
	case err == nil:
		return rdmapb.Code_OK
	case errors.Is(err, buffer.ErrReleased): // first: a remote RELEASED is also ErrBadKey
		return rdmapb.Code_RELEASED
	case errors.Is(err, buffer.ErrBadKey):
		return rdmapb.Code_BAD_KEY
	case errors.Is(err, buffer.ErrOutOfRange):
		return rdmapb.Code_OUT_OF_RANGE
	case errors.Is(err, buffer.ErrAccess):
		return rdmapb.Code_ACCESS_DENIED
	case errors.Is(err, buffer.ErrInvalid):
		return rdmapb.Code_INVALID_ARGUMENT
	case errors.Is(err, buffer.ErrExpired):
		return rdmapb.Code_LEASE_EXPIRED
	case errors.Is(err, buffer.ErrRevoked):
		return rdmapb.Code_REVOKED
	case errors.Is(err, buffer.ErrExhausted), errors.Is(err, ErrLimit):
		return rdmapb.Code_RESOURCE_EXHAUSTED
	case errors.Is(err, ErrPeerGone):
		return rdmapb.Code_PEER_GONE
	case errors.Is(err, ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		return rdmapb.Code_DEADLINE_EXCEEDED
	case errors.Is(err, ErrClosed), errors.Is(err, buffer.ErrClosed):
		return rdmapb.Code_CLOSED
	case errors.Is(err, ErrProtocol):
		return rdmapb.Code_PROTOCOL
	case errors.Is(err, ErrUnauthenticated):
		return rdmapb.Code_UNAUTHENTICATED
	case errors.Is(err, ErrVersion):
		return rdmapb.Code_VERSION_MISMATCH
	case errors.Is(err, ErrNotSupported):
		return rdmapb.Code_NOT_SUPPORTED
	}
	return rdmapb.Code_INTERNAL
}

// RemoteCode is Code for an answer to a remote peer: a wrong key and a
// region that does not exist (or was released) get the same code,
// RELEASED, so a peer cannot probe which regions exist. Local callers keep
// the precise sentinel.
func RemoteCode(err error) rdmapb.Code {
	c := Code(err)
	if c == rdmapb.Code_BAD_KEY {
		c = rdmapb.Code_RELEASED
	}
	return c
}

// Sentinel maps a wire code back to the sentinel error callers compare with;
// nil for OK and for codes without a data-path sentinel.
func Sentinel(c rdmapb.Code) error {
	switch c {
	case rdmapb.Code_OK:
		return nil
	case rdmapb.Code_BAD_KEY:
		return buffer.ErrBadKey
	case rdmapb.Code_OUT_OF_RANGE:
		return buffer.ErrOutOfRange
	case rdmapb.Code_ACCESS_DENIED:
		return buffer.ErrAccess
	case rdmapb.Code_RELEASED:
		return buffer.ErrReleased
	case rdmapb.Code_INVALID_ARGUMENT:
		return buffer.ErrInvalid
	case rdmapb.Code_LEASE_EXPIRED:
		return buffer.ErrExpired
	case rdmapb.Code_REVOKED:
		return buffer.ErrRevoked
	case rdmapb.Code_RESOURCE_EXHAUSTED:
		return ErrLimit
	case rdmapb.Code_PEER_GONE:
		return ErrPeerGone
	case rdmapb.Code_DEADLINE_EXCEEDED:
		return ErrDeadline
	case rdmapb.Code_CLOSED:
		return ErrClosed
	case rdmapb.Code_PROTOCOL:
		return ErrProtocol
	case rdmapb.Code_UNAUTHENTICATED:
		return ErrUnauthenticated
	case rdmapb.Code_VERSION_MISMATCH:
		return ErrVersion
	case rdmapb.Code_NOT_SUPPORTED:
		return ErrNotSupported
	}
	return nil
}

// RemoteError is an error reported by the peer for one work request.
type RemoteError struct {
	Code rdmapb.Code
	Op   Op
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("remote refused %s: %s", e.Op, e.Code)
}

// Unwrap returns the sentinel of the code.
func (e *RemoteError) Unwrap() error { return Sentinel(e.Code) }

// Is makes a remote RELEASED match buffer.ErrBadKey too: the peer answers
// a wrong key and an unknown region alike (RemoteCode), so either may be
// the cause and a caller may branch on whichever it expects.
func (e *RemoteError) Is(target error) bool {
	return e.Code == rdmapb.Code_RELEASED && target == buffer.ErrBadKey
}
