package actor

import (
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// opsState is what the manager keeps for operators beyond its control
// plane: when it started, the routes peers set up to it, and the watchers
// that log routes going down.
type opsState struct {
	started time.Time
	wg      sync.WaitGroup // route watchers; they end when their route does

	mu      sync.Mutex // guards the fields below
	inbound map[string]*inboundRoute
	sub     *eventstream.Subscription
	// refused are the handshakes we refused lately, by initiator id, for
	// the reason of its inbound route (choice.go).
	refused map[uint64]*refusedNote
}

// inboundRoute is a route a peer set up to us: we accepted its handshake.
type inboundRoute struct {
	addr   string // the peer's actor-system address
	peerID uint64
	kind   backend.Kind
	why    string
	since  time.Time
}

// pidString is the one spelling of a PID in logs and errors: "address/id".
func pidString(p *protoactor.PID) string {
	if p == nil {
		return "<nil>"
	}
	return p.Address + "/" + p.Id
}

// startOps notes the start and watches protoactor's endpoints: a peer's
// endpoint that terminates takes its inbound routes down.
func (m *Manager) startOps() {
	m.ops.mu.Lock()
	defer m.ops.mu.Unlock()
	m.ops.started = time.Now()
	m.ops.inbound = make(map[string]*inboundRoute)
	m.ops.sub = m.sys.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*remote.EndpointTerminatedEvent); ok {
			m.inboundGone(t.Address)
		}
	})
}

// stopOps ends the endpoint watch and waits for the route watchers (the
// routes are closed by then).
func (m *Manager) stopOps() {
	m.ops.mu.Lock()
	sub := m.ops.sub
	m.ops.sub = nil
	m.ops.mu.Unlock()
	if sub != nil {
		m.sys.EventStream.Unsubscribe(sub)
	}
	m.ops.wg.Wait()
}

// routeUp logs and counts an outbound route that came up and watches it
// until it goes down.
func (m *Manager) routeUp(e *routeEntry) {
	m.log.Info("route up", "direction", "out", "peer", e.key, "peer_id", fmt.Sprintf("%016x", e.peerID), "backend", e.kind, "why", e.why)
	m.cfg.Metrics.routeSetup("out", e.kind, nil)
	r := e.route
	m.ops.wg.Add(1)
	go func() {
		defer m.ops.wg.Done()
		<-r.Done()
		m.log.Info("route down", "direction", "out", "peer", e.key, "peer_id", fmt.Sprintf("%016x", e.peerID), "backend", e.kind, "err", r.Err())
		m.cfg.Metrics.routeDown("out", e.kind)
		m.forgetLingering(e) // routes.go
	}()
}

// inboundUp records and logs a route a peer set up to us.
func (m *Manager) inboundUp(hs *rdmapb.RouteHandshake) {
	key := fmt.Sprintf("%s/%016x", hs.InitiatorAddr, hs.InitiatorId)
	in := &inboundRoute{addr: hs.InitiatorAddr, peerID: hs.InitiatorId, kind: backend.Kind(hs.Backend), since: time.Now()}
	m.ops.mu.Lock()
	in.why = m.inboundWhyLocked(hs.InitiatorId)
	if m.ops.inbound != nil {
		m.ops.inbound[key] = in
	}
	m.ops.mu.Unlock()
	m.log.Info("route up", "direction", "in", "peer", hs.InitiatorAddr, "peer_id", fmt.Sprintf("%016x", hs.InitiatorId), "backend", hs.Backend, "why", in.why)
	m.cfg.Metrics.routeSetup("in", in.kind, nil)
}

// inboundGone takes down the inbound routes of the peer at addr, whose
// actor-system endpoint terminated.
func (m *Manager) inboundGone(addr string) {
	var gone []*inboundRoute
	m.ops.mu.Lock()
	for k, in := range m.ops.inbound {
		if in.addr == addr {
			gone = append(gone, in)
			delete(m.ops.inbound, k)
		}
	}
	m.ops.mu.Unlock()
	for _, in := range gone {
		m.log.Info("route down", "direction", "in", "peer", in.addr, "peer_id", fmt.Sprintf("%016x", in.peerID), "backend", in.kind, "err", "peer's endpoint terminated")
		m.cfg.Metrics.routeDown("in", in.kind)
	}
}

// servedByPeer collects what each backend that counts by peer served, by
// backend and peer manager id.
func (m *Manager) servedByPeer() map[backend.Kind]map[uint64]backend.PeerServedStats {
	out := make(map[backend.Kind]map[uint64]backend.PeerServedStats)
	for _, b := range m.backends {
		if ps, ok := b.(backend.PeerServer); ok {
			out[b.Kind()] = ps.ServedByPeer()
		}
	}
	return out
}

// observer is the queue pairs' Observer (nil without Metrics).
func (m *Manager) observer() qpbind.Observer {
	if m.cfg.Metrics == nil {
		return nil
	}
	return (*metricsObserver)(m.cfg.Metrics)
}

// statusOps adds inbound routes, version, uptime, leases and queue pairs to
// resp.
func (m *Manager) statusOps(resp *rdmapb.StatusResponse) {
	now := time.Now()
	served := m.servedByPeer()
	m.ops.mu.Lock()
	resp.UptimeMs = uint64(now.Sub(m.ops.started).Milliseconds())
	for _, in := range m.ops.inbound {
		rs := &rdmapb.RouteStatus{
			PeerId: in.peerID, PeerAddr: in.addr, Backend: string(in.kind), State: "up",
			AgeMs: uint64(now.Sub(in.since).Milliseconds()), Inbound: true, Why: in.why,
		}
		if st, ok := served[in.kind][in.peerID]; ok {
			rs.Ops, rs.BytesPut, rs.BytesGot, rs.Errors = st.Ops, st.BytesIn, st.BytesOut, st.Rejected
			if st.Conns == 0 {
				rs.State = "closed" // no data connection of the peer's is open
			}
		}
		resp.Inbound = append(resp.Inbound, rs)
	}
	m.ops.mu.Unlock()
	resp.Version = Version()
	for _, r := range m.reg.Regions() {
		if _, ok := m.reg.LeaseLeft(r); ok {
			resp.LeasedBuffers++
		}
	}
	m.mu.Lock()
	resp.QueuePairs = uint32(len(m.qps))
	m.mu.Unlock()
}

// Version is the build of the running binary: its main module's version
// ("(devel)" for a source build) and VCS revision when recorded.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			v += " " + s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			v += "+dirty"
		}
	}
	return v
}
