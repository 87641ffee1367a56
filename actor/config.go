package actor

import (
	"log/slog"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/control"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// DefaultName is the actor name of a manager.
const DefaultName = "rdma-manager"

// DefaultMaxMessageSize bounds control messages: the client refuses to
// send a larger one, and the gRPC transport (package remoteguard) enforces
// the same limit. The largest real one is a status reply (at most
// maxStatusBuffers buffers listed, a few tens of KiB).
const DefaultMaxMessageSize = control.DefaultMaxMessageSize

// Config configures a Manager. Zero fields take defaults. The backends are
// not configured here: whoever assembles the manager builds them over its
// registry and hands them to Start (package node does).
type Config struct {
	// Name is the manager's actor name (DefaultName).
	Name string
	// Limits bound the registry; zero fields take DefaultLimits' values
	// (limits.go).
	Limits buffer.Limits
	// MaxRemoteBytes caps the bytes that remote peers may hold through
	// RequestBuffer at once (0: DefaultMaxRemoteBytes).
	MaxRemoteBytes uint64
	// MaxRemoteBuffersPerPeer caps the buffers one remote peer holds
	// (DefaultMaxRemoteBuffersPerPeer).
	MaxRemoteBuffersPerPeer int
	// RemoteLease is the lease given to buffers remote peers request
	// without asking for one (0: DefaultRemoteLease; negative: none).
	RemoteLease time.Duration
	// HandshakesPerPeer caps the route handshakes accepted from one peer
	// per 30 s (DefaultHandshakesPerPeer).
	HandshakesPerPeer int
	// MaxLease caps any lease (24 h).
	MaxLease time.Duration
	// ReapInterval is how often buffers whose lease ran out are released
	// (1 s).
	ReapInterval time.Duration
	// MaxRoutes bounds the routes to peers (DefaultMaxRoutes).
	MaxRoutes int
	// RouteTimeout bounds a route setup (10 s).
	RouteTimeout time.Duration
	// RouteLinger keeps a route whose last queue pair was released for
	// this long (DefaultRouteLinger; negative: none), so that queue-pair
	// churn to a peer reuses its route rather than a handshake each time.
	RouteLinger time.Duration
	// OpTimeout is the default deadline of Put and Get (30 s).
	OpTimeout time.Duration
	// RequestTimeout bounds actor request round trips (10 s).
	RequestTimeout time.Duration
	// MaxMessageSize bounds control messages (DefaultMaxMessageSize).
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

func (c Config) withDefaults() Config {
	setIfZero(&c.Name, DefaultName)
	setIfZero(&c.MaxRoutes, DefaultMaxRoutes)
	d := DefaultLimits()
	setIfZero(&c.Limits.MaxBytes, d.MaxBytes)
	setIfZero(&c.Limits.MaxRegions, d.MaxRegions)
	setIfZero(&c.Limits.MaxRegion, min(d.MaxRegion, c.Limits.MaxBytes))
	setIfZero(&c.MaxRemoteBytes, min(DefaultMaxRemoteBytes(), c.Limits.MaxBytes))
	setIfZero(&c.MaxRemoteBuffersPerPeer, DefaultMaxRemoteBuffersPerPeer)
	setIfZero(&c.RemoteLease, DefaultRemoteLease)
	c.RemoteLease = max(c.RemoteLease, 0)
	setIfZero(&c.HandshakesPerPeer, DefaultHandshakesPerPeer)
	setIfZero(&c.MaxLease, 24*time.Hour)
	setIfZero(&c.ReapInterval, time.Second)
	setIfZero(&c.RouteTimeout, 10*time.Second)
	setIfZero(&c.RouteLinger, DefaultRouteLinger)
	setIfZero(&c.OpTimeout, queuepair.DefaultTimeout)
	setIfZero(&c.RequestTimeout, 10*time.Second)
	setIfZero(&c.MaxMessageSize, DefaultMaxMessageSize)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func setIfZero[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}
