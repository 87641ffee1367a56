package ibverbs

import "github.com/rdmamgr/rdmamgr"

// ErrNotBuilt is returned by New and Devices when the binary was built
// without the `ibverbs` build tag. It wraps rdmamgr.ErrNotSupported
// (rdmamgr.ErrNotSupported), so both errors.Is(err, ErrNotBuilt) and
// errors.Is(err, rdmamgr.ErrNotSupported) hold for it.
var ErrNotBuilt error = notBuiltError{}

type notBuiltError struct{}

func (notBuiltError) Error() string {
	return "ibverbs: not built with ibverbs support (build with -tags ibverbs)"
}

func (notBuiltError) Unwrap() error { return rdmamgr.ErrNotSupported }

// ErrNoDevices is returned by Devices and Start when the machine has no
// RDMA device (or the kernel has no RDMA support). It wraps
// rdmamgr.ErrNotSupported (rdmamgr.ErrNotSupported).
var ErrNoDevices error = noDevicesError{}

type noDevicesError struct{}

func (noDevicesError) Error() string {
	return "ibverbs: no RDMA devices (is rdma_rxe or a NIC driver loaded?)"
}

func (noDevicesError) Unwrap() error { return rdmamgr.ErrNotSupported }
