package tcp

import (
	"log/slog"

	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// New is newTCP for this package's tests (package node builds backends
// through wiring.NewBackend; no public constructor takes a registry).
func New(cfg Config, reg *memreg.Registry, log *slog.Logger) (*Backend, error) {
	return newTCP(cfg, reg, log)
}
