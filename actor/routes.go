package actor

import (
	"context"
	"errors"
	"fmt"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// routeEntry is the cached route to one peer manager.
type routeEntry struct {
	key   string
	peer  *protoactor.PID
	ready chan struct{} // closed when setup ended; then the fields below are fixed
	route backend.Route
	// peerID is the peer manager's id.
	peerID uint64
	kind   backend.Kind
	// why the route runs on kind: the backends passed over before it and
	// their reasons, or whyFirst / whyOnly (choice.go).
	why string
	err error
	// refs counts queue pairs on the route; guarded by Manager.mu.
	refs  int
	since time.Time // when setup ended
	// linger, while refs is 0, closes the idle route once it fires
	// (Config.RouteLinger); guarded by Manager.mu.
	linger *time.Timer
}

func peerKey(p *protoactor.PID) string { return p.Address + "/" + p.Id }

// routeKey is the key of route k to peer in the route table: route 0 is
// the one queue pairs share, "address/id"; route k > 0 (a host agent's
// further routes to a far agent: sharedRoute) is "address/id#k".
func routeKey(p *protoactor.PID, k int) string {
	if k == 0 {
		return peerKey(p)
	}
	return fmt.Sprintf("%s#%d", peerKey(p), k)
}

// getRoute returns the live route k (routeKey) to peer, setting one up if
// needed, with a reference the caller drops (dropRef, or through its
// queue pair). Callers for the same route share one setup.
func (m *Manager) getRoute(ctx context.Context, peer *protoactor.PID, k int) (*routeEntry, error) {
	e, err := m.refRoute(peer, k)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		m.dropRef(e)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The peer did not complete the route in time: to the caller
			// it is unreachable, whichever timer fired first (this one or
			// the setup's own RouteTimeout).
			return nil, fmt.Errorf("route to %s: no answer in time: %w: %w", e.key, rdmamgr.ErrUnknownPeer, ctx.Err())
		}
		return nil, fmt.Errorf("route to %s: %w", e.key, ctx.Err())
	}
	if e.err != nil {
		m.dropRef(e)
		return nil, e.err
	}
	return e, nil
}

// refRoute takes a reference to the route entry k of peer: the cached
// one unless its setup failed or its route is down (that one is dropped),
// else a new one whose setup starts now (within MaxRoutes, every route k
// counted).
func (m *Manager) refRoute(peer *protoactor.PID, k int) (*routeEntry, error) {
	key := routeKey(peer, k)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, rdmamgr.ErrClosed
	}
	e := m.routes[key]
	if e != nil {
		select {
		case <-e.ready:
			if e.err != nil || routeDead(e.route) {
				delete(m.routes, key)
				if r := e.route; r != nil {
					m.wg.Add(1)
					go func() { defer m.wg.Done(); r.Close() }() // its queue pairs fail with the route's error
				}
				e = nil
			}
		default:
		}
	}
	if e == nil {
		if len(m.routes) >= m.cfg.MaxRoutes {
			m.evictIdleLocked()
		}
		if len(m.routes) >= m.cfg.MaxRoutes {
			return nil, fmt.Errorf("%d routes, the most allowed (serve --max-routes): %w", len(m.routes), rdmamgr.ErrLimit)
		}
		e = &routeEntry{key: key, peer: peer, ready: make(chan struct{})}
		m.routes[key] = e
		m.wg.Add(1)
		go m.setupRoute(e)
	}
	if e.linger != nil {
		e.linger.Stop() // if it fired already, expireRoute sees refs > 0
		e.linger = nil
	}
	e.refs++
	return e, nil
}

func routeDead(r backend.Route) bool {
	if r == nil {
		return true
	}
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// setupRoute runs the handshake with the peer manager and connects the
// backend route, trying the backends in order of preference. The route's
// reason (e.why) lists the backends passed over before the one that
// connected: left out of this manager, or refused for this peer.
func (m *Manager) setupRoute(e *routeEntry) {
	defer m.wg.Done()
	defer close(e.ready)
	ctx, cancel := context.WithTimeout(m.life, m.cfg.RouteTimeout)
	defer cancel()
	var errs []error
	var passed []string
	for _, c := range m.choices {
		b := c.Backend
		if b == nil {
			passed = append(passed, reasonOf(c.Kind, c.Err))
			continue
		}
		r, peerID, err := m.handshake(ctx, e, b)
		if err == nil {
			e.route, e.peerID, e.kind, e.since = r, peerID, b.Kind(), time.Now()
			e.why = whyOf(passed, len(m.choices))
			if v, ok := r.(interface{ Via() string }); ok { // the agent backend: where it goes
				e.why += "; " + v.Via()
			}
			m.routeUp(e)
			return
		}
		errs = append(errs, err)
		if !errors.Is(err, rdmamgr.ErrNotSupported) && !errors.Is(err, rdmamgr.ErrVersion) {
			break // only a peer without this backend, or with another version of it, makes us try the next
		}
		passed = append(passed, reasonOf(b.Kind(), err))
	}
	e.err = errors.Join(errs...)
	m.cfg.Metrics.routeSetup("out", "", e.err)
}

// dropRef releases one reference to e. The last one leaves a live route
// idle for Config.RouteLinger, so that a caller that opens a queue pair
// per request reuses it instead of a new handshake each time; after that,
// or at once for a failed or still-starting route, the route closes.
func (m *Manager) dropRef(e *routeEntry) {
	m.mu.Lock()
	e.refs--
	last := e.refs == 0
	if last && m.routes[e.key] == e {
		if m.cfg.RouteLinger > 0 && !m.closed && routeUsable(e) {
			e.linger = time.AfterFunc(m.cfg.RouteLinger, func() { m.expireRoute(e) })
			m.mu.Unlock()
			return
		}
		delete(m.routes, e.key)
	}
	m.mu.Unlock()
	if !last {
		return
	}
	select {
	case <-e.ready:
		if e.route != nil {
			e.route.Close()
		}
	default:
		// Setup still running: the entry is already unreachable, so close
		// its route once the setup ends.
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			<-e.ready
			if e.route != nil {
				e.route.Close()
			}
		}()
	}
}

// routeUsable reports whether e's setup ended with a live route.
func routeUsable(e *routeEntry) bool {
	select {
	case <-e.ready:
		return e.err == nil && !routeDead(e.route)
	default:
		return false
	}
}

// forgetLingering closes and forgets e at once if it lingers (no queue
// pair holds it) and its route went down: a dead route is never reused,
// so it does not wait out its linger in the table. (A route that goes
// down while queue pairs hold it is forgotten when the last is released:
// dropRef lingers only usable routes.)
func (m *Manager) forgetLingering(e *routeEntry) {
	m.mu.Lock()
	if e.refs > 0 || e.linger == nil || m.routes[e.key] != e {
		m.mu.Unlock()
		return
	}
	e.linger.Stop()
	e.linger = nil
	delete(m.routes, e.key)
	m.mu.Unlock()
	if e.route != nil {
		e.route.Close()
	}
}

// expireRoute closes e once its linger ran out, unless a queue pair took
// it again meanwhile or the manager is closing (Close closes it then).
func (m *Manager) expireRoute(e *routeEntry) {
	m.mu.Lock()
	if m.closed || e.refs > 0 || m.routes[e.key] != e {
		m.mu.Unlock()
		return
	}
	delete(m.routes, e.key)
	e.linger = nil
	m.wg.Add(1)
	m.mu.Unlock()
	defer m.wg.Done()
	if e.route != nil {
		e.route.Close()
	}
}

// evictIdleLocked closes one lingering route (no queue pair on it) to
// make room under MaxRoutes. Called with m.mu held.
func (m *Manager) evictIdleLocked() {
	for k, e := range m.routes {
		if e.refs == 0 && e.linger != nil {
			e.linger.Stop()
			e.linger = nil
			delete(m.routes, k)
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				if e.route != nil {
					e.route.Close()
				}
			}()
			return
		}
	}
}
