package actor

import (
	"context"
	"sync"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// sharedRoute returns the manager's route to the manager name at addr,
// with one reference that release drops (once; later calls do nothing).
// It is the cached route every queue pair to that peer shares: a host
// agent posts on it directly for every process it serves, so one route
// (one set of data connections) joins each pair of agents. A dead route is
// rebuilt by the next call, as for queue pairs.
func (m *Manager) sharedRoute(ctx context.Context, addr, name string) (backend.Route, uint64, func(), error) {
	e, err := m.getRoute(ctx, protoactor.NewPID(addr, name))
	if err != nil {
		return nil, 0, nil, err
	}
	var once sync.Once
	return e.route, e.peerID, func() { once.Do(func() { m.dropRef(e) }) }, nil
}

func init() {
	wiring.SharedRoute = func(m any, ctx context.Context, addr, name string) (backend.Route, uint64, func(), error) {
		return m.(*Manager).sharedRoute(ctx, addr, name)
	}
}
