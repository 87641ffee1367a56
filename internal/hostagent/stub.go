//go:build !linux

package hostagent

import (
	"context"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
)

// Agent is a host agent; this platform has none (Linux only).
type Agent struct{}

// New fails: the host agent is Linux only.
func New(cfg Config, m *actor.Manager, tcp backend.Backend) (*Agent, error) {
	return nil, fmt.Errorf("hostagent: Linux only: %w", rdmamgr.ErrNotSupported)
}

// Start fails (there is no agent here).
func (a *Agent) Start(ctx context.Context) error { return rdmamgr.ErrNotSupported }

// Close does nothing.
func (a *Agent) Close() error { return nil }

// Addr is empty.
func (a *Agent) Addr() string { return "" }

// Procs is 0.
func (a *Agent) Procs() int { return 0 }

// SetFarCheck does nothing.
func (a *Agent) SetFarCheck(check func(ctx context.Context, addr string) error) {}
