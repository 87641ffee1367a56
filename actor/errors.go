package actor

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// errAskStopped: askReply's stop channel closed (the local manager closed)
// before a reply came.
var errAskStopped = errors.New("actor: manager closed while asking")

// toError turns a wire Error into a Go error wrapping the matching sentinel
// (the same one the peer's error wrapped: backend.Sentinel for the data
// path's codes). Codes that stand for several sentinels wrap all of them,
// so errors.Is works with whichever the caller expects: NOT_LOCAL wraps
// ErrNotLocal and rdmamgr.ErrInvalid, RELEASED (from a remote owner, which
// answers a wrong key alike) ErrReleased and ErrBadKey.
func toError(e *rdmapb.Error) error {
	if e == nil || e.Code == rdmapb.Code_OK {
		return nil
	}
	var s error
	msg := e.Message
	switch e.Code {
	case rdmapb.Code_UNKNOWN_MESSAGE:
		s = rdmamgr.ErrUnknownMessage
	case rdmapb.Code_UNKNOWN_PEER:
		s = rdmamgr.ErrUnknownPeer
	case rdmapb.Code_WRONG_PEER:
		s = rdmamgr.ErrWrongPeer
	case rdmapb.Code_NOT_LOCAL:
		return &multiError{msg: trimSentinels(msg, rdmamgr.ErrNotLocal, rdmamgr.ErrInvalid) + ": " + rdmamgr.ErrNotLocal.Error(),
			is: []error{rdmamgr.ErrNotLocal, rdmamgr.ErrInvalid}}
	case rdmapb.Code_RELEASED:
		// A remote owner answers a wrong key and a released or unknown
		// region alike (fromErrorFor): the caller cannot tell which.
		return &multiError{msg: trimSentinels(msg, rdmamgr.ErrReleased) + ": " + rdmamgr.ErrReleased.Error(),
			is: []error{rdmamgr.ErrReleased, rdmamgr.ErrBadKey}}
	default:
		s = backend.Sentinel(e.Code)
	}
	if s == nil {
		return fmt.Errorf("%s: %s", e.Code, e.Message)
	}
	// The peer's text ends with the sentinel's own words already: say them
	// once.
	if msg = trimSentinels(msg, s); msg == "" {
		return s
	}
	return fmt.Errorf("%s: %w", msg, s)
}

// trimSentinels removes trailing ": <sentinel text>" (and a bare sentinel
// text) from msg, as often as they repeat.
func trimSentinels(msg string, ss ...error) string {
	for {
		before := msg
		for _, s := range ss {
			msg = strings.TrimSuffix(msg, ": "+s.Error())
			if msg == s.Error() {
				msg = ""
			}
		}
		if msg == before {
			return msg
		}
	}
}

// multiError is a wire error that matches several sentinels; its text is
// the peer's, said once.
type multiError struct {
	msg string
	is  []error
}

func (e *multiError) Error() string   { return e.msg }
func (e *multiError) Unwrap() []error { return e.is }

// fromError turns a Go error into the wire Error.
func fromError(err error) *rdmapb.Error {
	if err == nil {
		return nil
	}
	code := backend.Code(err)
	switch {
	case errors.Is(err, rdmamgr.ErrUnknownMessage):
		code = rdmapb.Code_UNKNOWN_MESSAGE
	case errors.Is(err, rdmamgr.ErrUnknownPeer), errors.Is(err, rdmamgr.ErrTimeout):
		code = rdmapb.Code_UNKNOWN_PEER
	case errors.Is(err, rdmamgr.ErrClosed):
		code = rdmapb.Code_CLOSED
	case errors.Is(err, rdmamgr.ErrNotLocal):
		code = rdmapb.Code_NOT_LOCAL
	case errors.Is(err, rdmamgr.ErrLengthMismatch):
		code = rdmapb.Code_INVALID_ARGUMENT
	case errors.Is(err, rdmamgr.ErrWrongPeer):
		code = rdmapb.Code_WRONG_PEER
	}
	return &rdmapb.Error{Code: code, Message: err.Error()}
}

// fromErrorFor is fromError for a reply to a caller: a remote caller gets
// one code and one text for "no such region" and "wrong key" (RELEASED,
// see backend.RemoteCode), so it cannot probe which regions exist; a local
// caller keeps the precise sentinel.
//
// An error that wraps none of the module's sentinels (code INTERNAL: a
// system call, a mapping, a file) is internal: a remote caller gets the
// code and internalMessage, never its text (which may name paths, limits
// or addresses of this host); the caller logs the details.
func fromErrorFor(remote bool, err error) *rdmapb.Error {
	e := fromError(err)
	if remote && e != nil && (e.Code == rdmapb.Code_BAD_KEY || e.Code == rdmapb.Code_RELEASED) {
		e.Code, e.Message = rdmapb.Code_RELEASED, "no such buffer (released, or not this key)"
	}
	if remote && e != nil && e.Code == rdmapb.Code_INTERNAL {
		e.Message = internalMessage
	}
	return e
}

// internalMessage is what a remote caller reads of an internal error.
const internalMessage = "internal error (details in the owner's log)"

// replyError is fromErrorFor that logs what a remote caller is not told.
func (m *Manager) replyError(remote bool, what string, err error) *rdmapb.Error {
	e := fromErrorFor(remote, err)
	if remote && e != nil && e.Code == rdmapb.Code_INTERNAL {
		m.log.Warn("internal error answered to a peer without its details", "op", what, "err", err)
	}
	return e
}
