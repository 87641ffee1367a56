package actor

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/control"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// Manager is one endpoint's RDMA manager: registry, backends, routes and
// the actor that serves them.
//
// The code is by concern: config.go, lifecycle.go (New, Start, Close),
// receive.go (the actor: one handler per message), routes.go,
// handshake.go, choice.go (backends in order, routes' reasons),
// queuepairs.go, leases.go (remote quota and lease reaper),
// status.go, ops.go (operators' view), peers.go (membership).
type Manager struct {
	sys *protoactor.ActorSystem
	cfg Config
	id  uint64
	reg *memreg.Registry
	// backends in order of preference for new routes; the last is the
	// fallback every peer reaches (TCP in node's assembly). Set by Start.
	backends []backend.Backend
	// choices are backends and left-out backends in order of preference
	// (choice.go): route setups walk them. Set by Start.
	choices []Choice
	log     *slog.Logger

	mu sync.Mutex // guards the fields below
	// pid is set by Start; never handed out (PID returns copies).
	pid    *protoactor.PID
	routes map[string]*routeEntry // by peer PID "address/id"
	// nonces of accepted handshakes, until they expire: a replayed
	// handshake is refused.
	nonces map[string]time.Time
	qps    map[uint64]*qpEntry
	nextQP uint64
	closed bool
	// remoteBytes are the regions remote peers requested, by region id;
	// remoteTotal is their bytes (capped by MaxRemoteBytes) and
	// remotePerPeer their count by peer (capped by
	// MaxRemoteBuffersPerPeer).
	remoteBytes   map[uint64]remoteGrant
	remoteTotal   uint64
	remotePerPeer map[string]int
	// handshakes counts route handshakes by peer (HandshakesPerPeer).
	handshakes map[string]handshakeCount
	stop       chan struct{} // closed by Close: stops the reaper

	// life ends when Close starts: route setups in progress give up
	// instead of holding Close for their timeout.
	life    context.Context
	endLife context.CancelFunc

	wg sync.WaitGroup // route setups and replies sent from goroutines

	authFailures atomic.Uint64
	// book counts refusals and samples their logs (shared with the
	// remote guard of the same actor system).
	book *control.Book

	ops opsState // uptime, inbound routes, route watchers (ops.go)

	// inbox takes the PutWithImm events and Send messages the backends
	// deliver, for the subscribers (inbox.go, subscribe.go).
	inbox inbox
}

// isClosed reports whether Close has started.
func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// PID returns a PID of the manager actor (nil before Start). Each call
// returns a fresh copy: protoactor caches in a PID the process it resolved
// through the first actor system that used it, so a PID handed to another
// system must not be the one the manager's own system uses.
func (m *Manager) PID() *protoactor.PID {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pid == nil {
		return nil
	}
	return protoactor.NewPID(m.pid.Address, m.pid.Id)
}

// ID returns the manager's random id.
func (m *Manager) ID() uint64 { return m.id }

func init() {
	wiring.ManagerRegistry = func(m any) *memreg.Registry { return m.(*Manager).reg }
	wiring.PeerClient = func(m any, addr, name string) any {
		return m.(*Manager).peerClient(protoactor.NewPID(addr, name))
	}
}

// Logger returns the manager's logger (its lines carry the manager's id).
func (m *Manager) Logger() *slog.Logger { return m.log }

// preferred returns the manager's preferred backend (nil before Start).
func (m *Manager) preferred() backend.Backend {
	if len(m.backends) == 0 {
		return nil
	}
	return m.backends[0]
}

// Served returns what the manager's backends served for peers, summed.
func (m *Manager) Served() backend.ServedStats {
	var sv backend.ServedStats
	for _, b := range m.backends {
		x := b.Served()
		sv.Ops += x.Ops
		sv.BytesIn += x.BytesIn
		sv.BytesOut += x.BytesOut
		sv.Rejected += x.Rejected
		sv.AuthFail += x.AuthFail
	}
	return sv
}

// Client returns a typed client bound to this manager, able to hand out
// queue pairs.
func (m *Manager) Client() *Client {
	c := m.peerClient(m.PID())
	c.local = m
	return c
}

// peerClient returns a typed client of the manager at pid (in another
// process, or another in this one), sending from this manager's actor
// system with its request timeout and message limit: node.Node.ClientOf
// (through wiring.PeerClient).
func (m *Manager) peerClient(pid *protoactor.PID) *Client {
	c := NewClient(m.sys, pid)
	c.timeout = m.cfg.RequestTimeout
	c.maxMsg = m.cfg.MaxMessageSize
	return c
}

// Bytes returns the memory of a buffer this manager owns, for filling and
// reading it between transfers. The slice is invalid once the buffer is
// released.
func (m *Manager) Bytes(b buffer.Buffer) ([]byte, error) { return m.reg.Bytes(b) }

// kinds names the running backends, preferred first ("ibverbs+tcp").
func (m *Manager) kinds() string {
	s := make([]string, len(m.backends))
	for i, b := range m.backends {
		s[i] = string(b.Kind())
	}
	return strings.Join(s, "+")
}

func (m *Manager) backendOf(k backend.Kind) backend.Backend {
	for _, b := range m.backends {
		if b.Kind() == k {
			return b
		}
	}
	return nil
}

// dataAddr is where peers reach the fallback backend (status).
func (m *Manager) dataAddr() string {
	if len(m.backends) == 0 {
		return ""
	}
	return m.backends[len(m.backends)-1].Addr()
}

// SetCUDA gives the manager the CUDA driver device buffers (WithDevice)
// are allocated through; d nil: none, and a device request fails with
// rdmamgr.ErrNotSupported saying why. Call it before Start (package node
// does, from node.Config.CUDA). The manager never closes d.
func (m *Manager) SetCUDA(d cuda.Driver, why error) { m.reg.SetCUDA(d, why) }
