//go:build !ibverbs

package ibverbs

import (
	"log/slog"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// New reports that the binary was built without ibverbs support. The error
// wraps rdmamgr.ErrNotSupported.
func New(cfg Config, reg *memreg.Registry, log *slog.Logger) (backend.Backend, error) {
	return nil, ErrNotBuilt
}

// Devices reports that the binary was built without ibverbs support. The
// error wraps rdmamgr.ErrNotSupported.
func Devices() ([]DeviceInfo, error) {
	return nil, ErrNotBuilt
}
