package actor

import (
	"context"
	"fmt"
	"sync"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// maxSharedRoutes bounds k in sharedRoute: the routes one caller may ask
// for to one peer (MaxRoutes bounds them all together).
const maxSharedRoutes = 1024

// sharedRoute returns the manager's route k to the manager name at addr,
// its peer's id and backend, with one reference that release drops
// (once; later calls do nothing). Route 0 is the cached route every queue
// pair to that peer shares: a host agent posts on it directly for every
// process it serves. Route k > 0 is another route to the same peer, cached
// apart (routeKey: "addr/name#k" in status and logs) and counted against
// MaxRoutes: a host agent keeps several to a far agent on a backend whose
// route is one connection (ibverbs: one RC queue pair). A dead route is
// rebuilt by the next call, as for queue pairs.
func (m *Manager) sharedRoute(ctx context.Context, addr, name string, k int) (backend.Route, uint64, backend.Kind, func(), error) {
	if k < 0 || k >= maxSharedRoutes {
		return nil, 0, "", nil, fmt.Errorf("route %d to %s/%s: not in 0..%d: %w", k, addr, name, maxSharedRoutes-1, rdmamgr.ErrInvalid)
	}
	e, err := m.getRoute(ctx, protoactor.NewPID(addr, name), k)
	if err != nil {
		return nil, 0, "", nil, err
	}
	var once sync.Once
	return e.route, e.peerID, e.kind, func() { once.Do(func() { m.dropRef(e) }) }, nil
}

func init() {
	wiring.SharedRoute = func(m any, ctx context.Context, addr, name string, k int) (backend.Route, uint64, backend.Kind, func(), error) {
		return m.(*Manager).sharedRoute(ctx, addr, name, k)
	}
}
