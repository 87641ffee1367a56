package actor

import (
	"log/slog"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/control"
	"github.com/rdmamgr/rdmamgr/internal/defaults"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// DefaultName is the actor name of a manager.
const DefaultName = "rdma-manager"

// Config configures a Manager. Zero fields take DefaultConfig's values. The backends are
// not configured here: whoever assembles the manager builds them over its
// registry and hands them to Start (package node does).
type Config struct {
	// Name is the manager's actor name (DefaultName).
	Name string
	// Limits bound the registry (limits.go).
	Limits buffer.Limits
	// MaxRemoteBytes caps the bytes that remote peers may hold through
	// RequestBuffer at once (a quarter of physical memory).
	MaxRemoteBytes uint64
	// MaxRemoteBuffersPerPeer caps the buffers one remote peer holds
	// (1024, at most half of Limits.MaxRegions: one peer never takes
	// every region from the others).
	MaxRemoteBuffersPerPeer int
	// RemoteLease is the lease given to buffers remote peers request
	// without asking for one (10 min; negative: none).
	RemoteLease time.Duration
	// HandshakesPerPeer caps the route handshakes accepted from one peer
	// per 30 s (64).
	HandshakesPerPeer int
	// MaxLease caps any lease (24 h).
	MaxLease time.Duration
	// ReapInterval is how often buffers whose lease ran out are released
	// (1 s).
	ReapInterval time.Duration
	// MaxRoutes bounds the routes to peers (4096).
	MaxRoutes int
	// RouteTimeout bounds a route setup (10 s).
	RouteTimeout time.Duration
	// RouteLinger keeps a route whose last queue pair was released for
	// this long (30 s; negative: none), so that queue-pair
	// churn to a peer reuses its route rather than a handshake each time.
	RouteLinger time.Duration
	// OpTimeout is the default deadline of Put and Get (30 s).
	OpTimeout time.Duration
	// RequestTimeout bounds actor request round trips (10 s).
	RequestTimeout time.Duration
	// MaxMessageSize bounds control messages: the client refuses to send
	// a larger one, and the gRPC transport (package remoteguard) enforces
	// the same limit (1 MiB: the largest real one, a status reply, is a
	// few tens of KiB).
	MaxMessageSize int
	// Secret is shared by the managers of one deployment: the route
	// handshake and every data connection prove it (the backends get it
	// from their own config). The zero Secret turns authentication off
	// (loopback-only deployments).
	Secret backend.Secret
	// Logger receives the manager's logs; nil discards them.
	Logger *slog.Logger
	// Metrics, when not nil, counts operations and route setups (metrics.go).
	Metrics *Metrics
}

// DefaultConfig returns the values the zero fields of a Config take, for
// this machine (limits.go says why each): the one source of the manager's
// defaults.
func DefaultConfig() Config {
	mem := physicalMemory()
	regions := maxRegions
	if n := maxMapCount(); n > 0 && n/4 < regions {
		regions = max(n/4, 64)
	}
	if n := fdLimit(); n > 0 && n/2 < regions {
		regions = max(n/2, 64)
	}
	return Config{
		Name:                    DefaultName,
		Limits:                  buffer.Limits{MaxBytes: mib(mem / 100 * registeredShare), MaxRegions: regions, MaxRegion: mib(mem / 4)},
		MaxRemoteBytes:          mib(mem / 4),
		MaxRemoteBuffersPerPeer: remoteBuffersPerPeer(regions),
		RemoteLease:             10 * time.Minute,
		HandshakesPerPeer:       64,
		MaxLease:                24 * time.Hour,
		ReapInterval:            time.Second,
		MaxRoutes:               4096,
		RouteTimeout:            10 * time.Second,
		RouteLinger:             30 * time.Second,
		OpTimeout:               queuepair.DefaultTimeout,
		RequestTimeout:          defaultRequestTimeout,
		MaxMessageSize:          control.DefaultMaxMessageSize,
	}
}

// remoteBuffersPerPeer is MaxRemoteBuffersPerPeer's default for a
// registry of at most regions regions: 1024, or half of them if fewer.
func remoteBuffersPerPeer(regions int) int {
	return min(1024, max(regions/2, 1))
}

// defaultRequestTimeout is Config.RequestTimeout's default, and that of a
// client made by NewClient.
const defaultRequestTimeout = 10 * time.Second

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	defaults.Set(&c.Name, d.Name)
	defaults.Set(&c.MaxRoutes, d.MaxRoutes)
	defaults.Set(&c.Limits.MaxBytes, d.Limits.MaxBytes)
	defaults.Set(&c.Limits.MaxRegions, d.Limits.MaxRegions)
	defaults.Set(&c.Limits.MaxRegion, min(d.Limits.MaxRegion, c.Limits.MaxBytes))
	defaults.Set(&c.MaxRemoteBytes, min(d.MaxRemoteBytes, c.Limits.MaxBytes))
	defaults.Set(&c.MaxRemoteBuffersPerPeer, remoteBuffersPerPeer(c.Limits.MaxRegions))
	defaults.Set(&c.RemoteLease, d.RemoteLease)
	c.RemoteLease = max(c.RemoteLease, 0)
	defaults.Set(&c.HandshakesPerPeer, d.HandshakesPerPeer)
	defaults.Set(&c.MaxLease, d.MaxLease)
	defaults.Set(&c.ReapInterval, d.ReapInterval)
	defaults.Set(&c.RouteTimeout, d.RouteTimeout)
	defaults.Set(&c.RouteLinger, d.RouteLinger)
	defaults.Set(&c.OpTimeout, d.OpTimeout)
	defaults.Set(&c.RequestTimeout, d.RequestTimeout)
	defaults.Set(&c.MaxMessageSize, d.MaxMessageSize)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
