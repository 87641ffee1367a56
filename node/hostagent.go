package node

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/hostagent"
)

// HostAgent runs a node as its host's agent (issue 26): processes of the
// host attach to it on a unix socket and their operations to processes of
// other hosts go through it (internal/hostagent), on the manager's one
// route to each far agent. An agent runs ibverbs and TCP, no shm (Backend
// auto: ibverbs where usable, else TCP; ibverbs: ibverbs must start; tcp:
// TCP alone); the route to a far agent takes ibverbs when both agents run
// it, else TCP (the route's reason says why, as any route's). Routes
// data connections per pair of agents, whatever the number of processes,
// half each way (hostagent.RouteConns): on TCP one route each way, of
// half of them each; on ibverbs, where a route is one RC queue pair, half
// of them routes each way (each process pair pinned to one).
type HostAgent struct {
	// Socket is the attach socket's path (mode 0660, removed by Close);
	// "" runs no agent.
	Socket string
	// Routes is the number of TCP connections, or ibverbs queue pairs,
	// between two agents, both ways (at least hostagent.MinRoutes, 2;
	// default hostagent.DefaultRoutes, 4, as rv): each agent's share of
	// them to the other is half, the lower manager id's the extra one of
	// an odd number. The TCP backend's ConnsPerRoute is the larger half;
	// a route this node sets up to a manager that is not an agent gets the
	// half its manager id gives too. On ibverbs each of the agent's half
	// is a route (the manager's MaxRoutes counts them).
	Routes int
	// AllowUIDs are the users, besides ours, whose processes may attach
	// (default: SHM.AllowUIDs).
	AllowUIDs []int
	// HostID, when set, names the host to attached processes instead of
	// the one Config.HostID names (its boot id and namespaces, and
	// Config.HostID): tests run two agents on one host for processes
	// that leave Config.HostID empty. Processes go through their agents
	// only to processes whose agent names another host. Set Config.HostID
	// instead to make the agent's processes a host of their own for shm
	// too.
	HostID string
}

// agentDefaults applies agent mode to c: ibverbs and TCP (no shm), at
// most half of Routes TCP connections per route (startBackends splits
// them per peer).
func (c *Config) agentDefaults() error {
	h := &c.HostAgent
	if h.Socket == "" {
		return nil
	}
	switch c.Backend {
	case KindAuto, backend.KindIBVerbs, backend.KindTCP:
	default:
		return fmt.Errorf("host agent with backend %s: an agent runs ibverbs and tcp: %w", c.Backend, rdmamgr.ErrNotSupported)
	}
	if h.Routes == 0 {
		h.Routes = hostagent.DefaultRoutes
	}
	if h.Routes < hostagent.MinRoutes {
		return fmt.Errorf("host agent with %d connections per pair of agents: want at least %d (one route each way): %w", h.Routes, hostagent.MinRoutes, rdmamgr.ErrInvalid)
	}
	c.TCP.ConnsPerRoute = (h.Routes + 1) / 2
	if h.AllowUIDs == nil {
		h.AllowUIDs = c.SHM.AllowUIDs
	}
	return nil
}

// startHostAgent starts the host agent beside the manager (cfg.HostAgent).
func (n *Node) startHostAgent(ctx context.Context, cfg Config) error {
	h := cfg.HostAgent
	if h.Socket == "" {
		return nil
	}
	acfg := hostagent.Config{Socket: h.Socket, Secret: cfg.Manager.Secret, AllowUIDs: h.AllowUIDs, HostName: cfg.SHM.HostID,
		Serving: n.served, Routes: h.Routes, Logger: cfg.Logger}
	if h.HostID != "" {
		acfg.HostID = sha256.Sum256([]byte(h.HostID))
	}
	a, err := hostagent.New(acfg, n.mgr, n.tcp)
	if err != nil {
		return err
	}
	if err := a.Start(ctx); err != nil {
		a.Close()
		return err
	}
	n.agent = a
	return nil
}

// AgentAddr is the address attached processes name this node's agent by
// ("" when the node runs no agent).
func (n *Node) AgentAddr() string {
	if n.agent == nil {
		return ""
	}
	return n.agent.Addr()
}

// SetAgentFarCheck makes this node's agent dial only far agent addresses
// (AgentAddr's form) that check accepts, e.g. its cluster's members (nil:
// any whose route handshake says it is an agent); hostagent.SetFarCheck.
// It does nothing when the node runs no agent.
func (n *Node) SetAgentFarCheck(check func(ctx context.Context, addr string) error) {
	if n.agent != nil {
		n.agent.SetFarCheck(check)
	}
}
