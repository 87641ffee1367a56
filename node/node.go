package node

import (
	"context"
	"errors"
	"strings"
	"sync"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/hostagent"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	"github.com/rdmamgr/rdmamgr/remoteguard"
)

// Node is one running endpoint: actor system, remote and (unless
// Config.NoManager) a manager with its backends.
type Node struct {
	sys    *protoactor.ActorSystem
	remote *remoteguard.Remote
	addr   string
	mgr    *actor.Manager
	tcp    *tcp.Backend     // the manager's TCP backend (owned by the manager)
	kinds  []string         // the manager's backends, preferred first
	agent  *hostagent.Agent // Config.HostAgent's, or nil
	cuda   cuda.Driver      // opened by the node (Config.CUDA.Open), closed at Close
	// served: as an agent, the manager's backends besides TCP that reach
	// far agents (ibverbs), for the agent's resolver.
	served []backend.Backend

	closeOnce sync.Once
	closeErr  error
}

// Start builds and starts a node from cfg: the actor system and its remote
// on cfg.Listen, then (unless cfg.NoManager) the manager and the backends
// cfg.Backend selects (package doc). It does all the I/O; on error it
// returns with everything it had started closed again. ctx bounds the
// start only, not the node's life: Close ends it.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	sys := actor.NewActorSystem(cfg.ProtoactorLogger)
	r, addr, err := remoteguard.Start(sys, cfg.Listen, cfg.Remote, cfg.remoteOptions()...)
	if err != nil {
		sys.Shutdown()
		return nil, err
	}
	n := &Node{sys: sys, remote: r, addr: addr}
	if cfg.NoManager {
		return n, nil
	}
	if err := n.startManager(ctx, cfg); err != nil {
		n.Close()
		return nil, err
	}
	if err := n.startHostAgent(ctx, cfg); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// startManager builds the manager, its backends over its registry, and
// starts it.
func (n *Node) startManager(ctx context.Context, cfg Config) error {
	m, err := actor.New(n.sys, cfg.Manager)
	if err != nil {
		return err
	}
	switch {
	case cfg.CUDA.Driver != nil:
		m.SetCUDA(cfg.CUDA.Driver, nil)
	case cfg.CUDA.Open:
		d, err := cuda.Open()
		if err != nil {
			cfg.Logger.Info("no CUDA driver: device buffers refused", "err", err)
		}
		n.cuda = d
		m.SetCUDA(d, err)
	default:
		m.SetCUDA(nil, errors.New("node.Config.CUDA names no driver"))
	}
	cs, t, err := startBackends(ctx, cfg, m, n.addr)
	if err == nil {
		err = m.Start(ctx, cs...) // m owns the backends now, also when it fails
	}
	if err != nil {
		m.Close()
		return err
	}
	n.mgr, n.tcp = m, t
	for _, c := range cs {
		if c.Backend != nil {
			n.kinds = append(n.kinds, string(c.Backend.Kind()))
			if cfg.HostAgent.Socket != "" && c.Backend.Kind() == backend.KindIBVerbs {
				n.served = append(n.served, c.Backend)
			}
		}
	}
	return nil
}

// Close shuts down the host agent (Config.HostAgent), the manager (its
// routes, backends and registry), the remote and the actor system, and
// waits for them. Idempotent: later and
// concurrent calls wait for the first and return its error.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		if n.agent != nil { // first: its processes' operations use the manager's routes
			errs = append(errs, n.agent.Close())
		}
		if n.mgr != nil {
			errs = append(errs, n.mgr.Close())
		}
		if n.cuda != nil { // after the manager: its registry freed the device memory
			errs = append(errs, n.cuda.Close())
		}
		remoteguard.Stop(n.sys, n.remote) // hard, and waits for its connections
		n.sys.Shutdown()
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// Addr is the actor system's advertised address, "host:port": what peers
// dial.
func (n *Node) Addr() string { return n.addr }

// DataAddr is the advertised address of the manager's TCP data listener,
// the data plane every peer reaches ("" with Config.NoManager).
func (n *Node) DataAddr() string {
	if n.tcp == nil {
		return ""
	}
	return n.tcp.Addr()
}

// Backends names the manager's backends in order of preference, as status
// does ("shm+tcp"; "" with Config.NoManager).
func (n *Node) Backends() string { return strings.Join(n.kinds, "+") }

// System is the node's protoactor actor system.
func (n *Node) System() *protoactor.ActorSystem { return n.sys }

// Manager is the node's manager (nil with Config.NoManager).
func (n *Node) Manager() *actor.Manager { return n.mgr }

// ManagerPID is a fresh PID of the node's manager, for peers' requests
// and queue pairs (nil with Config.NoManager).
func (n *Node) ManagerPID() *protoactor.PID {
	if n.mgr == nil {
		return nil
	}
	return n.mgr.PID()
}

// Client is the typed client of the node's own manager, the one that
// hands out queue pairs (nil with Config.NoManager).
func (n *Node) Client() *actor.Client {
	if n.mgr == nil {
		return nil
	}
	return n.mgr.Client()
}

// ClientOf is a typed client of the manager named name (actor.DefaultName
// when "") at addr ("host:port", another node's Addr), sending from this
// node.
func (n *Node) ClientOf(addr, name string) *actor.Client {
	if name == "" {
		name = actor.DefaultName
	}
	if n.mgr != nil {
		return wiring.PeerClient(n.mgr, addr, name).(*actor.Client)
	}
	return actor.NewClient(n.sys, protoactor.NewPID(addr, name))
}
