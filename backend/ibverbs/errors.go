package ibverbs

import "github.com/rdmamgr/rdmamgr/backend"

// ErrNotBuilt is returned by New and Devices when the binary was built
// without the `ibverbs` build tag. It wraps backend.ErrNotSupported, so both
// errors.Is(err, ErrNotBuilt) and errors.Is(err, backend.ErrNotSupported)
// hold for it.
var ErrNotBuilt error = notBuiltError{}

type notBuiltError struct{}

func (notBuiltError) Error() string {
	return "ibverbs: not built with ibverbs support (build with -tags ibverbs)"
}

func (notBuiltError) Unwrap() error { return backend.ErrNotSupported }
