package memreg

import "github.com/rdmamgr/rdmamgr"

// Cutter is told when remote access to a region is cut: it is revoked, its
// release started (both before the registry waits for the remote requests
// in flight), or its lease was set again. A data plane with a request
// stalled in the region's memory (a peer that stops sending mid-payload)
// checks RemoteErr again and ends the request when it says so, so the
// wait is short. CutRegion must not block.
type Cutter interface {
	CutRegion(r *Region)
}

// CutterFunc adapts a function to a Cutter, so that a data plane's public
// type need not carry a CutRegion method.
type CutterFunc func(r *Region)

// CutRegion calls f(r).
func (f CutterFunc) CutRegion(r *Region) { f(r) }

// AddCutter registers c; it is called for every later revocation and
// release.
func (g *Registry) AddCutter(c Cutter) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cutters = append(g.cutters, c)
}

func (g *Registry) cut(r *Region) {
	g.mu.RLock()
	cs := g.cutters
	g.mu.RUnlock()
	for _, c := range cs {
		c.CutRegion(r)
	}
}

// RemoteErr tells whether a remote request admitted on r may still touch
// its memory: nil while it may, else ErrReleased (release started),
// ErrRevoked or ErrExpired (the lease ran out on the owner's clock), or
// what a proxy's gate says (RegisterProxy). A
// data plane checks it while a request's payload is still arriving.
func (g *Registry) RemoteErr(r *Region) error {
	switch {
	case r.refs.Closed():
		return rdmamgr.ErrReleased
	case r.revoked.Load():
		return rdmamgr.ErrRevoked
	}
	if g.expired(r.lease.Load()) {
		return rdmamgr.ErrExpired
	}
	if gt := r.gate; gt != nil { // a proxy: ask its owner's word
		if err := gt.Enter(); err != nil {
			return err
		}
		gt.Leave()
	}
	return nil
}
