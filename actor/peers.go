package actor

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
)

// failer is a route that can be ended with a given error (backend/tcp).
type failer interface{ Fail(error) }

// DropPeer tears down every route to managers at addr (an actor-system
// address "host:port"), as when membership reports that the peer left:
// queue pairs on those routes fail with rdmamgr.ErrPeerGone, and the next
// request for a queue pair sets a new route up. It returns the number of
// routes dropped.
func (m *Manager) DropPeer(addr, why string) int {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return 0
	}
	var gone []*routeEntry
	for k, e := range m.routes {
		if e.peer.Address != addr {
			continue
		}
		select {
		case <-e.ready:
		default:
			continue // a setup in progress fails on its own
		}
		delete(m.routes, k)
		gone = append(gone, e)
	}
	m.mu.Unlock()
	for _, e := range gone {
		r := e.route
		if r == nil {
			continue
		}
		if f, ok := r.(failer); ok {
			f.Fail(fmt.Errorf("peer %s left (%s): %w", e.key, why, rdmamgr.ErrPeerGone))
		}
		m.wg.Add(1)
		go func() { defer m.wg.Done(); r.Close() }()
		m.log.Info("route dropped: peer left", "peer", e.key, "why", why)
	}
	return len(gone)
}
