package tcp

import (
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr/backend"
)

// The TCP backend reports the backend package's sentinels (and buffer's for
// validation failures); these add context that callers may also branch on.
var (
	// ErrNotStarted: PrepareRoute or AcceptRoute before Start.
	ErrNotStarted = errors.New("tcp: backend not started")
	// ErrListenerDown: the data listener failed for good (an accept error
	// that no retry can cure); routes cannot be accepted until restart.
	// It is also backend.ErrClosed.
	ErrListenerDown = fmt.Errorf("tcp: data listener down: %w", backend.ErrClosed)
)
