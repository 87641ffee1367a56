//go:build linux

package hostagent

import (
	"context"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// farRoute is our manager's shared route to a far agent, with the one
// reference the agent holds on it (wiring.SharedRoute): every process's
// operations to that agent go over it.
type farRoute struct {
	ready   chan struct{} // closed when the setup ended; then below is fixed
	route   backend.Route
	peerID  uint64 // the far agent's manager id (the route handshake's)
	release func()
	err     error
}

// farRoute returns the route to the far agent at addr (Agent.Addr's form)
// and the far agent's manager id, setting it up if there is none or it went down; callers for one agent
// share one setup (bounded by ctx: a caller that gives up leaves it to
// the others).
func (a *Agent) farRoute(ctx context.Context, addr string) (backend.Route, uint64, error) {
	for {
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return nil, 0, fmt.Errorf("hostagent: %w", rdmamgr.ErrClosed)
		}
		f := a.far[addr]
		if f == nil {
			f = &farRoute{ready: make(chan struct{})}
			a.far[addr] = f
			a.wg.Add(1)
			go a.setupFar(f, addr)
		}
		a.mu.Unlock()
		select {
		case <-f.ready:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("hostagent: route to agent %s: %w: %w: %w", addr, rdmamgr.ErrPeerGone, rdmamgr.ErrUnknownPeer, ctx.Err())
		}
		if f.err != nil {
			a.forgetFar(addr, f)
			return nil, 0, f.err
		}
		select {
		case <-f.route.Done():
			a.forgetFar(addr, f) // down: the next turn sets up another
			continue
		default:
			return f.route, f.peerID, nil
		}
	}
}

// cachedFar is farRoute when the route is up already, else nil.
func (a *Agent) cachedFar(addr string) (backend.Route, uint64) {
	a.mu.Lock()
	f := a.far[addr]
	a.mu.Unlock()
	if f == nil {
		return nil, 0
	}
	select {
	case <-f.ready:
	default:
		return nil, 0
	}
	if f.err != nil {
		return nil, 0
	}
	select {
	case <-f.route.Done():
		return nil, 0
	default:
		return f.route, f.peerID
	}
}

// setupFar sets up f's route (within the manager's route timeout, and
// our life).
func (a *Agent) setupFar(f *farRoute, addr string) {
	defer a.wg.Done()
	defer close(f.ready)
	host, name := splitAddr(addr)
	r, peerID, release, err := wiring.SharedRoute(a.mgr, a.life, host, name)
	if err != nil {
		// The process's operation answers PEER_GONE (not INTERNAL: an
		// unreachable agent has no wire code of its own), which ends its
		// route to the far process; the next one is set up afresh.
		f.err = fmt.Errorf("hostagent: route to agent %s: %w: %w", addr, rdmamgr.ErrPeerGone, err)
		return
	}
	f.route, f.peerID, f.release = r, peerID, release
}

// forgetFar drops f, if it is still addr's, and its reference.
func (a *Agent) forgetFar(addr string, f *farRoute) {
	a.mu.Lock()
	if a.far[addr] == f {
		delete(a.far, addr)
	} else {
		f = nil
	}
	a.mu.Unlock()
	if f != nil && f.release != nil {
		f.release()
	}
}

// dropFarRoutes drops every far route's reference (Close, once nothing
// posts any more).
func (a *Agent) dropFarRoutes() {
	a.mu.Lock()
	fs := a.far
	a.far = make(map[string]*farRoute)
	a.mu.Unlock()
	for _, f := range fs {
		<-f.ready
		if f.release != nil {
			f.release()
		}
	}
}

// spawn runs f in a goroutine the agent's Close waits for, unless the
// agent is closing (then it reports false and f does not run).
func (a *Agent) spawn(f func()) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f()
	}()
	return true
}
