package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// The data path reports the module's sentinels (package rdmamgr); a remote
// peer's refusal carries the sentinel of its wire code (Sentinel), so one
// errors.Is works whichever side found the fault.

// Code maps an error to the wire code; nil is OK.
func Code(err error) rdmapb.Code {
	switch {
	case err == nil:
		return rdmapb.Code_OK
	case errors.Is(err, rdmamgr.ErrReleased): // first: a remote RELEASED is also ErrBadKey
		return rdmapb.Code_RELEASED
	case errors.Is(err, rdmamgr.ErrBadKey):
		return rdmapb.Code_BAD_KEY
	case errors.Is(err, rdmamgr.ErrOutOfRange):
		return rdmapb.Code_OUT_OF_RANGE
	case errors.Is(err, rdmamgr.ErrAccess):
		return rdmapb.Code_ACCESS_DENIED
	case errors.Is(err, rdmamgr.ErrInvalid):
		return rdmapb.Code_INVALID_ARGUMENT
	case errors.Is(err, rdmamgr.ErrExpired):
		return rdmapb.Code_LEASE_EXPIRED
	case errors.Is(err, rdmamgr.ErrRevoked):
		return rdmapb.Code_REVOKED
	case errors.Is(err, rdmamgr.ErrLimit):
		return rdmapb.Code_RESOURCE_EXHAUSTED
	case errors.Is(err, rdmamgr.ErrPeerGone):
		return rdmapb.Code_PEER_GONE
	case errors.Is(err, rdmamgr.ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		return rdmapb.Code_DEADLINE_EXCEEDED
	case errors.Is(err, rdmamgr.ErrClosed):
		return rdmapb.Code_CLOSED
	case errors.Is(err, rdmamgr.ErrProtocol):
		return rdmapb.Code_PROTOCOL
	case errors.Is(err, rdmamgr.ErrUnauthenticated):
		return rdmapb.Code_UNAUTHENTICATED
	case errors.Is(err, rdmamgr.ErrVersion):
		return rdmapb.Code_VERSION_MISMATCH
	case errors.Is(err, rdmamgr.ErrNotSupported):
		return rdmapb.Code_NOT_SUPPORTED
	case errors.Is(err, rdmamgr.ErrNoReceive):
		return rdmapb.Code_NO_RECEIVE
	case errors.Is(err, rdmamgr.ErrReceiveTooSmall):
		return rdmapb.Code_RECEIVE_TOO_SMALL
	case errors.Is(err, rdmamgr.ErrMisaligned):
		return rdmapb.Code_MISALIGNED
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
		return rdmamgr.ErrBadKey
	case rdmapb.Code_OUT_OF_RANGE:
		return rdmamgr.ErrOutOfRange
	case rdmapb.Code_ACCESS_DENIED:
		return rdmamgr.ErrAccess
	case rdmapb.Code_RELEASED:
		return rdmamgr.ErrReleased
	case rdmapb.Code_INVALID_ARGUMENT:
		return rdmamgr.ErrInvalid
	case rdmapb.Code_LEASE_EXPIRED:
		return rdmamgr.ErrExpired
	case rdmapb.Code_REVOKED:
		return rdmamgr.ErrRevoked
	case rdmapb.Code_RESOURCE_EXHAUSTED:
		return rdmamgr.ErrLimit
	case rdmapb.Code_PEER_GONE:
		return rdmamgr.ErrPeerGone
	case rdmapb.Code_DEADLINE_EXCEEDED:
		return rdmamgr.ErrDeadline
	case rdmapb.Code_CLOSED:
		return rdmamgr.ErrClosed
	case rdmapb.Code_PROTOCOL:
		return rdmamgr.ErrProtocol
	case rdmapb.Code_UNAUTHENTICATED:
		return rdmamgr.ErrUnauthenticated
	case rdmapb.Code_VERSION_MISMATCH:
		return rdmamgr.ErrVersion
	case rdmapb.Code_NOT_SUPPORTED:
		return rdmamgr.ErrNotSupported
	case rdmapb.Code_NO_RECEIVE:
		return rdmamgr.ErrNoReceive
	case rdmapb.Code_RECEIVE_TOO_SMALL:
		return rdmamgr.ErrReceiveTooSmall
	case rdmapb.Code_MISALIGNED:
		return rdmamgr.ErrMisaligned
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

// Is makes a remote RELEASED match rdmamgr.ErrBadKey too: the peer answers
// a wrong key and an unknown region alike (RemoteCode), so either may be
// the cause and a caller may branch on whichever it expects.
func (e *RemoteError) Is(target error) bool {
	return e.Code == rdmapb.Code_RELEASED && target == rdmamgr.ErrBadKey
}
