//go:build !ibverbs

package ibverbs

import (
	"log/slog"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

func init() { wiring.SetBackend(newIBVerbs) }

// newIBVerbs reports that the binary was built without ibverbs support.
// The error wraps rdmamgr.ErrNotSupported.
func newIBVerbs(cfg Config, reg *memreg.Registry, log *slog.Logger) (backend.Backend, error) {
	return nil, ErrNotBuilt
}

// Devices reports that the binary was built without ibverbs support. The
// error wraps rdmamgr.ErrNotSupported.
func Devices() ([]DeviceInfo, error) {
	return nil, ErrNotBuilt
}
