package bench

import "errors"

// Why a run stopped early (Result.Stop), besides its context's cause and
// rdmamgr.ErrPeerGone (the peer is gone).
var (
	ErrTooManyErrors = errors.New("too many failed operations (--max-errors)")
)
