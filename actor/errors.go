package actor

import (
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

var (
	// ErrUnknownMessage: the manager does not handle the message.
	ErrUnknownMessage = errors.New("actor: unknown message")
	// ErrUnknownPeer: the peer manager could not be reached or named.
	ErrUnknownPeer = errors.New("actor: unknown or unreachable peer")
	// ErrTimeout: no answer from the manager in time.
	ErrTimeout = errors.New("actor: request timed out")
	// ErrNotLocal: the operation needs a manager in this process.
	ErrNotLocal = errors.New("actor: manager is not in this process")
	// ErrMessageTooLarge: a message over the configured gRPC limit.
	ErrMessageTooLarge = errors.New("actor: message too large")
	// ErrClosed: the manager is closed.
	ErrClosed = errors.New("actor: manager closed")
	// ErrBadResponse: a reply of the wrong type or shape.
	ErrBadResponse = errors.New("actor: bad response")
)

// toError turns a wire Error into a Go error wrapping the matching sentinel.
// Codes that several sentinels share wrap all of them, so errors.Is works
// with whichever the caller expects: RESOURCE_EXHAUSTED wraps
// buffer.ErrExhausted (a registry limit) and backend.ErrLimit (a route or
// data-path limit); CLOSED wraps ErrClosed (the manager) and
// backend.ErrClosed (its backend or registry); NOT_LOCAL wraps ErrNotLocal
// and buffer.ErrInvalid (what it was before it had its own code).
func toError(e *rdmapb.Error) error {
	if e == nil || e.Code == rdmapb.Code_OK {
		return nil
	}
	var s error
	switch e.Code {
	case rdmapb.Code_UNKNOWN_MESSAGE:
		s = ErrUnknownMessage
	case rdmapb.Code_UNKNOWN_PEER:
		s = ErrUnknownPeer
	case rdmapb.Code_WRONG_PEER:
		s = queuepair.ErrWrongPeer
	case rdmapb.Code_NOT_LOCAL:
		return fmt.Errorf("%s: %w, %w", e.Message, ErrNotLocal, buffer.ErrInvalid)
	case rdmapb.Code_RESOURCE_EXHAUSTED:
		return fmt.Errorf("%s: %w, %w", e.Message, buffer.ErrExhausted, backend.ErrLimit)
	case rdmapb.Code_CLOSED:
		return fmt.Errorf("%s: %w, %w", e.Message, ErrClosed, backend.ErrClosed)
	default:
		s = backend.Sentinel(e.Code)
	}
	if s == nil {
		return fmt.Errorf("%s: %s", e.Code, e.Message)
	}
	return fmt.Errorf("%s: %w", e.Message, s)
}

// fromError turns a Go error into the wire Error.
func fromError(err error) *rdmapb.Error {
	if err == nil {
		return nil
	}
	code := backend.Code(err)
	switch {
	case errors.Is(err, ErrUnknownMessage):
		code = rdmapb.Code_UNKNOWN_MESSAGE
	case errors.Is(err, ErrUnknownPeer), errors.Is(err, ErrTimeout):
		code = rdmapb.Code_UNKNOWN_PEER
	case errors.Is(err, ErrClosed):
		code = rdmapb.Code_CLOSED
	case errors.Is(err, ErrNotLocal):
		code = rdmapb.Code_NOT_LOCAL
	case errors.Is(err, queuepair.ErrNotLocal), errors.Is(err, queuepair.ErrLengthMismatch):
		code = rdmapb.Code_INVALID_ARGUMENT
	case errors.Is(err, queuepair.ErrWrongPeer):
		code = rdmapb.Code_WRONG_PEER
	case errors.Is(err, queuepair.ErrReleased):
		code = rdmapb.Code_RELEASED
	}
	return &rdmapb.Error{Code: code, Message: err.Error()}
}

// fromErrorFor is fromError for a reply to a caller: a remote caller gets
// one code and one text for "no such region" and "wrong key" (RELEASED,
// see backend.RemoteCode), so it cannot probe which regions exist; a local
// caller keeps the precise sentinel.
func fromErrorFor(remote bool, err error) *rdmapb.Error {
	e := fromError(err)
	if remote && e != nil && (e.Code == rdmapb.Code_BAD_KEY || e.Code == rdmapb.Code_RELEASED) {
		e.Code, e.Message = rdmapb.Code_RELEASED, "no such buffer (released, or not this key)"
	}
	return e
}
