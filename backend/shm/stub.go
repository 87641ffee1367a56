//go:build !linux

package shm

import (
	"context"
	"log/slog"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// Backend is the shm backend; this build has none (not Linux).
type Backend struct{}

func init() { wiring.SetBackend(newSHM) }

// newSHM returns ErrNotBuilt: shared memory between processes needs
// Linux (memfd, SCM_RIGHTS, SO_PEERCRED).
func newSHM(Config, *memreg.Registry, *slog.Logger) (*Backend, error) { return nil, ErrNotBuilt }

func (b *Backend) Kind() backend.Kind          { return backend.KindSHM }
func (b *Backend) Start(context.Context) error { return ErrNotBuilt }
func (b *Backend) Addr() string                { return "" }
func (b *Backend) Served() backend.ServedStats { return backend.ServedStats{} }
func (b *Backend) Close() error                { return nil }
func (b *Backend) AcceptRoute(context.Context, uint64, []byte) ([]byte, error) {
	return nil, ErrNotBuilt
}
func (b *Backend) PrepareRoute(context.Context, uint64) (backend.PendingRoute, []byte, error) {
	return nil, nil, ErrNotBuilt
}

func init() {
	wiring.SHMAcceptAgentRoute = func(any, context.Context, uint64, []byte) ([]byte, error) { return nil, ErrNotBuilt }
}
