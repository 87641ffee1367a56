package tcp

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// Frames that name an attached process (via, origin): served only by a
// host agent, whose Resolver (wiring.SetResolver) maps the process's
// region and key to a proxy region of the agent's registry. See the
// package doc, "Host agents".

// resolverRef boxes the resolver for an atomic pointer.
type resolverRef struct{ r agentapi.Resolver }

func init() { wiring.AddResolverSetter(setResolver) }

// setResolver is this package's part of wiring.SetResolver: it gives b
// (a *Backend) r.
func setResolver(bb backend.Backend, r agentapi.Resolver) bool {
	b, ok := bb.(*Backend)
	if !ok || b == nil {
		return false
	}
	if r == nil {
		b.resolver.Store(nil)
	} else {
		b.resolver.Store(&resolverRef{r: r})
	}
	return true
}

var _ agentapi.FarAgent = (*route)(nil)

// FarIsAgent implements agentapi.FarAgent: the responder's route answer
// said it is a host agent (responderAgentBit), answering our agent.
func (r *route) FarIsAgent() bool { return r.farAgent }

var (
	errViaNoAgent    = fmt.Errorf("tcp: a frame for an attached process (via) to a server that is not a host agent: %w", rdmamgr.ErrNotSupported)
	errOriginNoAgent = fmt.Errorf("tcp: an origin on a frame to a server that is not a host agent: %w", rdmamgr.ErrNotSupported)
	errOriginNoVia   = fmt.Errorf("tcp: an origin on a frame for the agent itself (no via): %w", rdmamgr.ErrNotSupported)
	errOriginPeer    = fmt.Errorf("tcp: an origin on a frame from a peer that is not a host agent: %w", rdmamgr.ErrNotSupported)
)

// resolveSlack: a connection reuses its resolve context while at least
// ResolveTimeout-resolveSlack of it is left, so one Resolve is bounded by
// between that and ResolveTimeout, and a run of them costs a context a
// second at most.
const resolveSlack = time.Second

// viaState is a served connection's state for frames with a via: the
// resolve context and the last resolution (a run of frames for one region
// resolves once).
type viaState struct {
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time

	memo struct {
		ok       bool
		rr       *resolverRef // the resolver that gave it
		via      uint16
		region   uint64
		key      buffer.Key
		local    uint64
		localKey buffer.Key
	}
	// err is a failure of the connection met while acquiring (the flush
	// before a Resolve): the serve loop ends with it.
	err error
}

// acquire is reg.AcquireRemote of [off, off+n) of the region h names,
// through the resolver when h names an attached process.
func (s *serverConn) acquire(h *reqHeader, off, n uint64, need buffer.Access) (memreg.Ref, error) {
	if h.via == 0 && h.origin == 0 {
		return s.b.reg.AcquireRemote(h.region, h.key, off, n, need)
	}
	return s.acquireVia(h, off, n, need)
}

// acquireVia resolves h's (via, region, key) to a proxy region and
// acquires it. The last resolution is tried first, whatever need it was
// made for (the proxy's own AcquireRemote checks this frame's: the plain
// WRITEs and the last write-imm frame of a PutWithImm share it); if the
// proxy does not admit the request (gone, revoked, re-mapped, or
// registered for less access), the resolver is asked again. Before a Resolve, which may wait (first use maps the region),
// the batch is flushed: no READ reference waits on it.
func (s *serverConn) acquireVia(h *reqHeader, off, n uint64, need buffer.Access) (memreg.Ref, error) {
	rr := s.b.resolver.Load()
	switch {
	case rr == nil && h.via != 0:
		return memreg.Ref{}, errViaNoAgent
	case rr == nil:
		return memreg.Ref{}, errOriginNoAgent
	case h.via == 0:
		return memreg.Ref{}, errOriginNoVia
	case h.origin != 0 && !s.peerAgent:
		return memreg.Ref{}, errOriginPeer
	}
	m := &s.via.memo
	if m.ok && m.rr == rr && m.via == h.via && m.region == h.region && m.key == h.key {
		if ref, err := s.b.reg.AcquireRemote(m.local, m.localKey, off, n, need); err == nil {
			return ref, nil
		}
		m.ok = false
	}
	if s.payload > 0 {
		if err := s.flush(); err != nil {
			s.via.err = err
			return memreg.Ref{}, err
		}
	}
	s.resolveStart() // via_keep.go: pings answered while it waits
	local, localKey, err := rr.r.Resolve(s.resolveCtx(), h.via, h.region, h.key, need)
	if kerr := s.resolveEnd(); kerr != nil {
		s.via.err = kerr
		return memreg.Ref{}, kerr
	}
	if err != nil {
		return memreg.Ref{}, err
	}
	ref, err := s.b.reg.AcquireRemote(local, localKey, off, n, need)
	if err != nil {
		return memreg.Ref{}, err
	}
	m.ok, m.rr, m.via = true, rr, h.via
	m.region, m.key, m.local, m.localKey = h.region, h.key, local, localKey
	return ref, nil
}

// resolveCtx is the context of one Resolve: it ends at most
// agentapi.ResolveTimeout from now, or when the backend closes.
func (s *serverConn) resolveCtx() context.Context {
	now := time.Now()
	if s.via.ctx == nil || s.via.deadline.Sub(now) < agentapi.ResolveTimeout-resolveSlack {
		if s.via.cancel != nil {
			s.via.cancel()
		}
		s.via.deadline = now.Add(agentapi.ResolveTimeout)
		s.via.ctx, s.via.cancel = context.WithDeadline(s.b.life, s.via.deadline)
	}
	return s.via.ctx
}

// endVia releases the connection's resolve context.
func (s *serverConn) endVia() {
	s.endKeep()
	if s.via.cancel != nil {
		s.via.cancel()
	}
	s.via = viaState{}
}

// noticePeer is the manager a write-imm's event or a send's message names:
// the origin the agent posted it for, else the connection's peer.
func (s *serverConn) noticePeer(h *reqHeader) uint64 {
	if h.origin != 0 {
		return h.origin
	}
	return s.peerID
}

// inboxOf returns the inbox h's event or message goes to: the process's
// at via through the resolver, or nil for the backend's own.
func (s *serverConn) inboxOf(h *reqHeader) (backend.Inbox, error) {
	if h.via == 0 && h.origin == 0 {
		return nil, nil
	}
	rr := s.b.resolver.Load()
	switch {
	case rr == nil && h.via != 0:
		return nil, errViaNoAgent
	case rr == nil:
		return nil, errOriginNoAgent
	case h.via == 0:
		return nil, errOriginNoVia
	case h.origin != 0 && !s.peerAgent:
		return nil, errOriginPeer
	}
	in, err := rr.r.Inbox(h.via)
	if err == nil && in == nil {
		err = fmt.Errorf("tcp: no inbox for via %d: %w", h.via, rdmamgr.ErrNoReceive)
	}
	return in, err
}

// recv takes a landing for a send of n bytes from the inbox h names.
func (s *serverConn) recv(h *reqHeader, n uint64) (backend.Landing, error) {
	if h.via == 0 && h.origin == 0 {
		return s.b.recv(s.peerID, n)
	}
	in, err := s.inboxOf(h)
	if err != nil {
		return nil, err
	}
	return in.Recv(s.noticePeer(h), n)
}
