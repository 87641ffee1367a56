package tcp

import (
	"errors"

	"github.com/rdmamgr/rdmamgr/backend"
)

// The TCP backend reports the backend package's sentinels (and buffer's for
// validation failures); these add context that callers may also branch on.
var (
	// ErrNotStarted: PrepareRoute or AcceptRoute before Start.
	ErrNotStarted = errors.New("tcp: backend not started")
	// errConnClosed marks a connection that was closed locally.
	errConnClosed = backend.ErrClosed
)
