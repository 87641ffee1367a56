//go:build linux

package hostagent

import (
	"errors"
	"slices"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// farSet is our manager's routes to one far agent: every process's
// operations to that agent go over them, each (slot, via) pair pinned to
// one (pinOf). It holds one route on TCP (whose connections are the
// pair's share of N: RouteConns), RouteConns routes on ibverbs (a route
// is one RC queue pair there); routes[0] is the manager's route 0 to the
// far agent, routes[k] its route k (wiring.SharedRoute).
type farSet struct {
	ready chan struct{} // closed when route 0's setup ended; then below is fixed
	err   error         // route 0's setup failed: the set is forgotten
	// notAgent: route 0's handshake said the far end is no host agent.
	notAgent bool
	peerID   uint64       // the far agent's manager id (route 0's handshake)
	kind     backend.Kind // route 0's backend: the set's width is its
	// routes has the set's width once ready; a.mu guards its elements,
	// each replaced alone when its route went down, and gone.
	routes []*farRoute
	gone   bool // forgotten: its routes' references dropped
}

// farRoute is one of a farSet's routes, with the one reference the agent
// holds on it.
type farRoute struct {
	ready   chan struct{} // closed when the setup ended; then below is fixed
	k       int           // its number: the manager's route k to the far agent
	route   backend.Route
	peerID  uint64 // the far agent's manager id (the route handshake's)
	kind    backend.Kind
	release func()
	err     error
	// notAgent: the route handshake said the far end is no host agent.
	notAgent bool
}

// pinOf is the pin of the operations from the process at slot to the far
// process at via: the one route of a far set they all take (pin modulo
// its width), so they keep the order they were posted in (RC's, on that
// route: a PutWithImm follows the Puts before it), whatever the number of
// routes. A hash (splitmix64's finalizer) spreads the pairs over them.
func pinOf(slot, via uint16) uint32 {
	x := uint64(slot)<<16 | uint64(via)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return uint32(x >> 32)
}

// pick is the number of the route pin takes in s (ready): pin modulo the
// width, or route 0 in place of one the manager refused past its
// MaxRoutes (for the set's life: the pairs pinned there keep one route,
// so their order). Called with a.mu held.
func (s *farSet) pick(pin uint32) int {
	k := int(pin % uint32(len(s.routes)))
	if f := s.routes[k]; f != nil && f.limited() {
		return 0
	}
	return k
}

// farWidth is the number of routes to a far agent whose route 0 runs on
// kind: on TCP one (its connections carry the pair's share of N:
// RouteConns), on ibverbs our share of N (one RC queue pair per route).
func (a *Agent) farWidth(kind backend.Kind, peerID uint64) int {
	if kind != backend.KindIBVerbs && !a.cfg.spreadTCP {
		return 1
	}
	return RouteConns(a.cfg.Routes, a.mgr.ID(), peerID)
}

// limited reports whether f is a route k > 0 that the manager refused
// past its MaxRoutes: its set posts on route 0 instead.
func (f *farRoute) limited() bool {
	return f.k > 0 && f.setupEnded() && errors.Is(f.err, rdmamgr.ErrLimit)
}

// setupEnded reports whether f's setup ended.
func (f *farRoute) setupEnded() bool {
	select {
	case <-f.ready:
		return true
	default:
		return false
	}
}

func routeDown(r backend.Route) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// forgetFarRoute drops f from s, if it is still there, and its reference.
func (a *Agent) forgetFarRoute(s *farSet, f *farRoute) {
	a.mu.Lock()
	if s.routes[f.k] == f {
		s.routes[f.k] = nil
	}
	a.mu.Unlock()
	if f.release != nil {
		f.release() // once: a second call does nothing
	}
}

// releaseSet marks s gone (no route of it is set up any more) and drops
// its routes' references, once each has set up.
func (a *Agent) releaseSet(s *farSet) {
	<-s.ready
	a.mu.Lock()
	s.gone = true
	fs := slices.Clone(s.routes)
	a.mu.Unlock()
	for _, f := range fs {
		if f == nil {
			continue
		}
		<-f.ready
		if f.release != nil {
			f.release()
		}
	}
}
