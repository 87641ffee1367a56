package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/agent"
	"github.com/rdmamgr/rdmamgr/backend/ibverbs"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/internal/hostagent"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// order is the backends cfg.Backend selects, in order of preference; TCP,
// which every peer reaches, is always last. With an agent, the agent
// backend comes right after shm: same host stays on shm.
func order(k backend.Kind, withAgent bool) []backend.Kind {
	for _, s := range selections {
		if s.kind != k {
			continue
		}
		if !withAgent {
			return s.order
		}
		var o []backend.Kind
		for _, b := range s.order {
			o = append(o, b)
			if b == backend.KindSHM {
				o = append(o, backend.KindAgent)
			}
		}
		return o
	}
	return []backend.Kind{backend.KindTCP}
}

// startBackends builds the backends over m's registry and starts them, in
// the order of preference cfg.Backend selects (doc.go). Under "auto" a
// backend that cannot start here is left out, with a log line and a
// Choice that says why (routes' reasons name it); a backend selected by
// name must start. It returns the choices for m.Start and the TCP
// backend; on error it closes what it made.
func startBackends(ctx context.Context, cfg Config, m *actor.Manager, advertised string) ([]actor.Choice, *tcp.Backend, error) {
	log := m.Logger()
	reg := wiring.ManagerRegistry(m)
	tcfg := cfg.TCP
	tcfg.Secret = cfg.Manager.Secret
	placeData(&tcfg, cfg.Listen, advertised)
	if n, self := cfg.HostAgent.Routes, m.ID(); cfg.HostAgent.Socket != "" {
		tcfg.ConnsFor = func(peer uint64) int { return hostagent.RouteConns(n, self, peer) }
	}
	t, err := wiring.NewBackend[*tcp.Backend](tcfg, reg, log)
	if err != nil {
		return nil, nil, err
	}
	if err := t.Start(ctx); err != nil { // first: it is shm's fallback
		t.Close()
		return nil, nil, err
	}
	var cs []actor.Choice
	fail := func(err error) ([]actor.Choice, *tcp.Backend, error) {
		for _, c := range cs {
			if c.Backend != nil {
				c.Backend.Close()
			}
		}
		t.Close()
		return nil, nil, err
	}
	var shmb backend.Backend // started, for the agent backend
	ord := order(cfg.Backend, cfg.Agent != "")
	if cfg.HostAgent.Socket != "" { // an agent reaches far agents only
		ord = slices.DeleteFunc(slices.Clone(ord), func(k backend.Kind) bool { return k == backend.KindSHM })
	}
	for _, k := range ord {
		var b backend.Backend
		var err error
		switch k {
		case backend.KindTCP:
			b = t
		case backend.KindSHM:
			b, err = startSHM(ctx, cfg, t, reg, log)
			shmb = b
		case backend.KindAgent:
			b, err = startAgentBackend(ctx, cfg, m, advertised, shmb, reg, log)
		case backend.KindIBVerbs:
			if cfg.Agent != "" {
				err = errAttachedIBVerbs
				break
			}
			icfg := cfg.IBVerbs
			icfg.Fallback = t // device buffers without dma-buf at the peer
			b, err = startIBVerbs(ctx, icfg, reg, log)
			if err == nil && cfg.HostAgent.Socket != "" {
				b, err = agentIBVerbs(b)
			}
		}
		if err != nil && cfg.Backend != KindAuto {
			return fail(err)
		}
		if err != nil {
			leftOut(log, k, err)
			cs = append(cs, actor.Choice{Kind: k, Err: err})
			continue
		}
		cs = append(cs, actor.Choice{Backend: b})
	}
	return cs, t, nil
}

// leftOut logs why "auto" runs without backend k: at info level when this
// build has no such backend (the expected state of a default build) or a
// process attached to a host agent leaves it to the agent, else as a
// warning.
func leftOut(log *slog.Logger, k backend.Kind, err error) {
	if errors.Is(err, ibverbs.ErrNotBuilt) || errors.Is(err, shm.ErrNotBuilt) {
		log.Info("backend not built: routes use the next one", "backend", k, "err", err)
		return
	}
	if err == errAttachedIBVerbs {
		log.Info("backend left to the host agent: routes use the next one", "backend", k)
		return
	}
	log.Warn("backend unusable here: routes use the next one", "backend", k, "err", err)
}

// errAttachedIBVerbs: a process attached to a host agent leaves ibverbs
// to its agent. The agent maps the process's regions from their memfds
// (shm export), and a registry whose memory a device pins exports none
// (memreg: Revoke would move pages under the device's registration); the
// agent's route to other agents takes ibverbs, one set of queue pairs
// per pair of hosts.
var errAttachedIBVerbs = fmt.Errorf("ibverbs: left to the host agent (an attached process shares its memory with the agent, which a device's registration would pin): %w", rdmamgr.ErrNotSupported)

// startSHM builds and starts the shm backend: the deployment's secret, and
// the node's TCP backend t as the fallback for regions that are not in
// shared memory.
func startSHM(ctx context.Context, cfg Config, t *tcp.Backend, reg *memreg.Registry, log *slog.Logger) (backend.Backend, error) {
	scfg := cfg.SHM
	scfg.Secret, scfg.Fallback = cfg.Manager.Secret, t
	b, err := wiring.NewBackend[*shm.Backend](scfg, reg, log)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	if err := b.Start(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("shm: %w", err)
	}
	return b, nil
}

// startAgentBackend builds and starts the agent backend over the started shm
// backend shmb (nil: shm is out, and so is the agent). Start attaches, or
// keeps trying in the background: an absent agent is no error.
func startAgentBackend(ctx context.Context, cfg Config, m *actor.Manager, advertised string, shmb backend.Backend, reg *memreg.Registry, log *slog.Logger) (backend.Backend, error) {
	if shmb == nil {
		return nil, fmt.Errorf("agent: needs the shm backend, which is out: %w", rdmamgr.ErrNotSupported)
	}
	reg.SetUnpooled() // the agent maps our regions while we use them (memreg)
	acfg := agent.Config{Socket: cfg.Agent, Secret: cfg.Manager.Secret, ManagerID: m.ID(), Addr: advertised, SHM: shmb}
	b, err := wiring.NewBackend[*agent.Backend](acfg, reg, log)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if err := b.Start(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	return b, nil
}

func startIBVerbs(ctx context.Context, cfg ibverbs.Config, reg *memreg.Registry, log *slog.Logger) (backend.Backend, error) {
	b, err := wiring.NewBackend[backend.Backend](cfg, reg, log)
	if err != nil {
		return nil, err
	}
	if err := b.Start(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("ibverbs: %w", err)
	}
	return b, nil
}

// agentIBVerbs checks that an agent's started ibverbs backend b can serve
// far agents' frames for the agent's processes (it takes a resolver:
// wiring.SetResolver, nil until the agent sets its own); if not, b is
// closed and the agent's routes take TCP.
func agentIBVerbs(b backend.Backend) (backend.Backend, error) {
	if wiring.SetResolver(b, nil) {
		return b, nil
	}
	b.Close()
	return nil, fmt.Errorf("ibverbs: this build serves no frames for a host agent's processes: %w", rdmamgr.ErrNotSupported)
}

// placeData puts a TCP data listener left at its default address next to
// the actor system: bound to the actor system's bind host (listen), port
// 0, and advertised at the host of its advertised address, so peers on
// other hosts reach it as they reach the actor system. A listener given a
// wildcard address (serve --data-listen :7000) is advertised at that host
// too.
func placeData(c *tcp.Config, listen, advertised string) {
	if c.AdvertiseAddr != "" || c.AdvertiseHost != "" {
		return
	}
	if c.ListenAddr != "" {
		host, _, err := net.SplitHostPort(c.ListenAddr)
		if ip := net.ParseIP(host); err != nil || (host != "" && (ip == nil || !ip.IsUnspecified())) {
			return
		}
	} else {
		host, _, err := net.SplitHostPort(listen)
		if err != nil {
			return
		}
		c.ListenAddr = net.JoinHostPort(host, "0")
	}
	if ah, _, err := net.SplitHostPort(advertised); err == nil {
		c.AdvertiseHost = ah
	}
}
