package node

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/ibverbs"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/remoteguard"
)

// KindAuto, the default, chooses per peer: shm for a peer on this host,
// else ibverbs where a usable device exists, else TCP (doc.go).
const KindAuto backend.Kind = "auto"

// selections are the values of Config.Backend, the default first, each
// with the backends it runs in order of preference: TCP, which every peer
// reaches, always last. It is the one list of backends: Start's check,
// its errors and the CLI's --backend read it.
var selections = []struct {
	kind  backend.Kind
	order []backend.Kind
	says  string
}{
	{KindAuto, []backend.Kind{backend.KindSHM, backend.KindIBVerbs, backend.KindTCP}, "shm for a peer on this host, else ibverbs where usable, else tcp"},
	{backend.KindSHM, []backend.Kind{backend.KindSHM, backend.KindTCP}, "shm, else tcp"},
	{backend.KindIBVerbs, []backend.Kind{backend.KindIBVerbs, backend.KindTCP}, "ibverbs, else tcp"},
	{backend.KindTCP, []backend.Kind{backend.KindTCP}, ""},
}

// Backends describes the values of Config.Backend, the default first, for
// a flag's help: "auto (shm for a peer on this host, ...), ... or tcp".
func Backends() string {
	var b strings.Builder
	for i, s := range selections {
		switch {
		case i == len(selections)-1:
			b.WriteString(" or ")
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(string(s.kind))
		if s.says != "" {
			fmt.Fprintf(&b, " (%s)", s.says)
		}
	}
	return b.String()
}

// ParseBackend returns the Config.Backend named s ("" is KindAuto), or an
// error that wraps rdmamgr.ErrNotSupported and lists the values.
func ParseBackend(s string) (backend.Kind, error) {
	if s == "" {
		return KindAuto, nil
	}
	var names []string
	for _, sel := range selections {
		if string(sel.kind) == s {
			return sel.kind, nil
		}
		names = append(names, string(sel.kind))
	}
	return "", fmt.Errorf("backend %q (want one of %s): %w", s, strings.Join(names, ", "), rdmamgr.ErrNotSupported)
}

// DefaultListen is where a node's actor system listens by default:
// loopback, a port picked by the kernel.
const DefaultListen = "127.0.0.1:0"

// Config configures a node. Zero fields take defaults.
type Config struct {
	// Listen is the actor system's address, "host:port" (port 0 picks
	// one; DefaultListen). A wildcard host advertises a routable address
	// of this host (remoteguard).
	Listen string
	// Advertise is the host (or host:port) peers use to reach us, for the
	// actor system and the TCP data listener; default: the bind address.
	Advertise string
	// ServerTLS and ClientTLS, when set, run the control plane over mutual
	// TLS (certs.Credentials has both).
	ServerTLS, ClientTLS *tls.Config
	// Secret is the deployment's shared secret. Without TLS it seals the
	// control plane: every control connection, both ways, proves it
	// (remoteguard.WithSecret), so a process without it gets nothing from
	// this node. It is Manager.Secret's default (and Manager.Secret, when
	// set, is its).
	Secret backend.Secret
	// Remote hardens the gRPC server. Its MaxMessageSize is also the
	// manager's unless Manager.MaxMessageSize is set.
	Remote remoteguard.Config

	// NoManager starts only the actor system and remote: a client of
	// other nodes' managers.
	NoManager bool
	// Manager configures the manager; its Logger defaults to Logger, and
	// its Secret is the data planes' too (TCP and shm).
	Manager actor.Config
	// Backend selects the data planes and their order of preference:
	// "auto" (default: shm, ibverbs, TCP, each where usable), "shm" (shm,
	// then TCP), "ibverbs" (ibverbs, then TCP) or "tcp" (doc.go).
	Backend backend.Kind
	// TCP configures the TCP backend. A data listener left at its default
	// address binds the actor system's bind host (port 0) and advertises
	// the host peers reach the actor system at.
	TCP tcp.Config
	// IBVerbs configures the ibverbs backend (ibverbs.DefaultConfig).
	IBVerbs ibverbs.Config
	// SHM configures the shm backend. Its Secret is Manager.Secret and its
	// Fallback the node's TCP backend: both are set by the node.
	SHM shm.Config
	// Agent is the path of the host agent's attach socket (`rdmamgr serve
	// --agent-socket`); "" runs without one. With it the node runs the
	// agent backend after shm (backend/agent): routes to processes of
	// other hosts that are attached to their agents go through both
	// agents. It needs shm (Backend auto or shm). An agent that is not
	// there is logged and tried again every second: routes go direct
	// meanwhile, and through the agent once it is there (again).
	Agent string

	// HostID, when not "", names this node's host beyond its kernel: a
	// peer whose HostID differs is another host though it shares our
	// kernel (boot id) and namespaces, so shm refuses it (the next
	// backend takes the route) and host agents of different HostIDs are
	// agents of different hosts. For test rigs (two agents and their
	// processes in one VM) and for processes sharing a kernel that must
	// act as separate hosts. A process attaches only to an agent of its
	// own HostID. "" (the default) is the kernel's host: boot id and
	// network, pid and user namespaces (package internal/hostid). It is
	// SHM.HostID's default.
	HostID string

	// HostAgent, when its Socket is set, runs the node as its host's
	// agent (hostagent.go): ibverbs (where usable) and TCP, no shm;
	// HostAgent.Routes TCP connections or ibverbs queue pairs per pair
	// of agents.
	HostAgent HostAgent

	// CUDA is how the manager reaches the CUDA driver for device buffers
	// (actor.WithDevice).
	CUDA CUDAConfig

	// Logger receives the node's logs (manager, backends, remote); nil
	// discards them.
	Logger *slog.Logger
	// ProtoactorLogger receives protoactor's own logs (routine connection
	// churn at error level); nil discards them.
	ProtoactorLogger *slog.Logger
}

// CUDAConfig says which CUDA driver device buffers are allocated
// through. With neither field set (the default) there is none: a device
// RequestBuffer fails with rdmamgr.ErrNotSupported.
type CUDAConfig struct {
	// Driver, when not nil, is used as is and never closed by the node
	// (tests pass a cudafake one).
	Driver cuda.Driver
	// Open loads libcuda.so.1 at Start (cuda.Open) when Driver is nil;
	// the node closes it at Close. A machine without a driver or a GPU
	// starts all the same: its device requests fail with
	// rdmamgr.ErrNotSupported naming why Open failed.
	Open bool
}

func (c Config) withDefaults() (Config, error) {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	k, err := ParseBackend(string(c.Backend))
	if err != nil {
		return c, err
	}
	c.Backend = k
	if c.Agent != "" && k != KindAuto && k != backend.KindSHM {
		return c, fmt.Errorf("node: an agent (%s) needs the shm backend: backend %q: %w", c.Agent, k, rdmamgr.ErrInvalid)
	}
	if c.Agent != "" && c.HostAgent.Socket != "" {
		return c, fmt.Errorf("node: a host agent (%s) does not attach to one (%s): %w", c.HostAgent.Socket, c.Agent, rdmamgr.ErrInvalid)
	}
	if c.SHM.HostID == "" {
		c.SHM.HostID = c.HostID
	}
	if err := c.agentDefaults(); err != nil {
		return c, err
	}
	if c.IBVerbs == (ibverbs.Config{}) {
		c.IBVerbs = ibverbs.DefaultConfig() // GID index auto, not 0
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Manager.Logger == nil {
		c.Manager.Logger = c.Logger
	}
	if !c.Manager.Secret.Enabled() {
		c.Manager.Secret = c.Secret
	} else if !c.Secret.Enabled() {
		c.Secret = c.Manager.Secret
	}
	if c.Manager.MaxMessageSize == 0 {
		c.Manager.MaxMessageSize = c.Remote.MaxMessageSize
	}
	return c, nil
}

// remoteOptions are remoteguard's options for c.
func (c Config) remoteOptions() []remoteguard.Option {
	opts := []remoteguard.Option{remoteguard.WithLogger(c.Logger)}
	if c.Advertise != "" {
		opts = append(opts, remoteguard.WithAdvertise(c.Advertise))
	}
	if c.ServerTLS != nil || c.ClientTLS != nil {
		opts = append(opts, remoteguard.WithTLS(c.ServerTLS, c.ClientTLS))
	} else if c.Secret.Enabled() {
		opts = append(opts, remoteguard.WithSecret(c.Secret))
	}
	return opts
}
