package tcp

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
)

// The TCP backend reports the module's sentinels (package rdmamgr); these
// add context that callers may also branch on.
var (
	// ErrListenerDown: the data listener failed for good (an accept error
	// that no retry can cure); routes cannot be accepted until restart.
	// It is also rdmamgr.ErrClosed.
	ErrListenerDown = fmt.Errorf("tcp: data listener down: %w", rdmamgr.ErrClosed)
)
