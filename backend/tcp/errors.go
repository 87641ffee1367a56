package tcp

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
)

// The TCP backend reports the module's sentinels (package rdmamgr, under
// their backend and buffer names); these add context that callers may also
// branch on.
var (
	// ErrNotStarted: PrepareRoute or AcceptRoute before Start. It is
	// rdmamgr.ErrNotStarted.
	ErrNotStarted = rdmamgr.ErrNotStarted
	// ErrListenerDown: the data listener failed for good (an accept error
	// that no retry can cure); routes cannot be accepted until restart.
	// It is also backend.ErrClosed.
	ErrListenerDown = fmt.Errorf("tcp: data listener down: %w", rdmamgr.ErrClosed)
)
