//go:build !ibverbs

package ibverbs

import (
	"log/slog"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// New reports that the binary was built without ibverbs support. The error
// wraps backend.ErrNotSupported.
func New(cfg Config, reg *buffer.Registry, log *slog.Logger) (backend.Backend, error) {
	return nil, ErrNotBuilt
}

// Devices reports that the binary was built without ibverbs support. The
// error wraps backend.ErrNotSupported.
func Devices() ([]DeviceInfo, error) {
	return nil, ErrNotBuilt
}
