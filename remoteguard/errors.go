package remoteguard

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
)

// ErrTooManyConns: a gRPC connection over the connection caps (it is
// closed at once). It is rdmamgr.ErrLimit.
var ErrTooManyConns = fmt.Errorf("too many control connections: %w", rdmamgr.ErrLimit)
