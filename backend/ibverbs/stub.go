//go:build !ibverbs

package ibverbs

import (
	"log/slog"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Config selects the RDMA device and port of the backend.
type Config struct {
	Device   string // device name, e.g. "mlx5_0"; empty picks the first active one
	Port     int    // port number (1-based); 0 picks the first active port
	GIDIndex int    // GID table index used for RoCE addressing
}

// DeviceInfo describes one RDMA device port.
type DeviceInfo struct {
	Name  string
	Port  int
	State string
	GIDs  []string
}

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
