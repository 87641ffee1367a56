//go:build linux

package shm

import (
	"context"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// A host agent's side of an shm route (package doc, "A host agent"): the
// agent is an initiator of each attached process and registers the
// regions it maps from it as proxy regions of its own registry
// (memreg.RegisterProxy), behind a gate over the region's state-table
// slot. Reached through internal/wiring.ProxyRoute.

var _ wiring.ProxyRoute = (*route)(nil)

// MapProxy implements wiring.ProxyRoute.
func (r *route) MapProxy(ctx context.Context, region uint64, key buffer.Key, need buffer.Access) ([]byte, memreg.Gate, error) {
	return nil, nil, errRouteClosed // TODO(agmem): fill in
}

// OnCut implements wiring.ProxyRoute.
func (r *route) OnCut(f func(region uint64)) {}

// acceptAgentRoute is AcceptRoute for this process's own host agent
// (wiring.SHMAcceptAgentRoute): the connection that proves the token it
// hands out is marked as the agent's.
func (b *Backend) acceptAgentRoute(ctx context.Context, peerID uint64, p []byte) ([]byte, error) {
	return b.acceptRoute(ctx, peerID, p, true)
}

func init() {
	wiring.SHMAcceptAgentRoute = func(b any, ctx context.Context, peerID uint64, info []byte) ([]byte, error) {
		return b.(*Backend).acceptAgentRoute(ctx, peerID, info)
	}
}
