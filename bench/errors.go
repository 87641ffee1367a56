package bench

import (
	"errors"

	"github.com/rdmamgr/rdmamgr"
)

// Why a run stopped early (Result.Stop), besides its context's cause.
var (
	ErrTooManyErrors = errors.New("too many failed operations (--max-errors)")
)

// errPeerGone stops a run whose peer died: it reads "the peer is gone"
// (the report's stopped field) and matches rdmamgr.ErrPeerGone.
var errPeerGone = peerGone{}

type peerGone struct{}

func (peerGone) Error() string        { return "the peer is gone" }
func (peerGone) Is(target error) bool { return target == rdmamgr.ErrPeerGone }
