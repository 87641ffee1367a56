package shm

import (
	"context"
	"log/slog"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Backend is the shm backend of one manager.
type Backend struct {
	cfg Config
	reg *memreg.Registry
	log *slog.Logger
}

// New returns a backend serving reg; it does no I/O.
func New(cfg Config, reg *memreg.Registry, log *slog.Logger) (*Backend, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Backend{cfg: cfg.withDefaults(), reg: reg, log: log}, nil
}

// Kind implements backend.Backend.
func (b *Backend) Kind() backend.Kind { return backend.KindSHM }

// Start implements backend.Backend.
func (b *Backend) Start(ctx context.Context) error { return nil }

// Addr implements backend.Backend.
func (b *Backend) Addr() string { return "" }

// PrepareRoute implements backend.Backend.
func (b *Backend) PrepareRoute(ctx context.Context, peerID uint64) (backend.PendingRoute, []byte, error) {
	return nil, nil, ErrNotSameHost
}

// AcceptRoute implements backend.Backend.
func (b *Backend) AcceptRoute(ctx context.Context, peerID uint64, info []byte) ([]byte, error) {
	return nil, ErrNotSameHost
}

// Served implements backend.Backend.
func (b *Backend) Served() backend.ServedStats { return backend.ServedStats{} }

// Close implements backend.Backend.
func (b *Backend) Close() error { return nil }
