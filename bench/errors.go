package bench

import "errors"

// Why a run stopped early (Result.Stop), besides its context's cause.
var (
	ErrPeerGone      = errors.New("the peer is gone")
	ErrTooManyErrors = errors.New("too many failed operations (--max-errors)")
)
