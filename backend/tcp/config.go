package tcp

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Config tunes the TCP backend. Zero fields take DefaultConfig's values.
type Config struct {
	// ListenAddr is the data listener's address ("127.0.0.1:0" by default).
	ListenAddr string
	// AdvertiseAddr is what peers dial; default: the listener's address.
	AdvertiseAddr string
	// ConnsPerRoute is the number of TCP connections of a route.
	ConnsPerRoute int
	// ConnsFor, when set, is the number of TCP connections of a route we
	// set up to the manager peerID, instead of ConnsPerRoute (a host
	// agent splits its connections per pair of agents: node/hostagent.go).
	// A result outside 1..ConnsPerRoute counts as ConnsPerRoute.
	ConnsFor func(peerID uint64) int
	// ChunkSize is the largest frame payload the initiator sends; larger
	// operations are split and striped over the route's connections.
	ChunkSize int
	// MaxFrameLen is the largest payload the server accepts in one frame.
	MaxFrameLen int
	// MaxInFlight bounds the chunks in flight per route (back-pressure).
	MaxInFlight int
	// TokenTTL is how long a route token handed out by AcceptRoute is valid.
	TokenTTL time.Duration
	// MaxPendingTokens bounds the tokens handed out and not yet used.
	MaxPendingTokens int
	// MaxTokensPerPeer bounds the tokens pending for one peer manager
	// (default 256: four routes of the most connections). When the table
	// is full, a peer holding fewer tokens takes the oldest tokens of the
	// peer holding the most (tokens.go): one peer never holds them all.
	MaxTokensPerPeer int
	// HelloTimeout bounds the time a new data connection has to finish
	// the hello (default 3 s: a hello is one round trip, and a silent
	// connection must give its slot back soon).
	HelloTimeout time.Duration
	// MaxServerConns bounds the authenticated connections served at once
	// (default 4096). Connections still in the hello do not count.
	MaxServerConns int
	// MaxConnsPerPeer bounds the authenticated connections of one peer
	// manager (default 256). When MaxServerConns are served, a peer with
	// fewer connections than the one holding the most closes one of that
	// peer's (server_accept.go).
	MaxConnsPerPeer int
	// IdleTimeout closes an authenticated connection that sent nothing,
	// not even a heartbeat ping, for this long (default 30 s; peers ping
	// an idle connection every HeartbeatInterval); it is closed no sooner,
	// and at most IdleTimeout/8 + 1 ms later.
	IdleTimeout time.Duration
	// MaxPendingConns bounds the connections accepted and not yet through
	// the hello, in all (default 1024); more are closed as they are
	// accepted, so silent connections cannot starve authenticated ones.
	MaxPendingConns int
	// MaxPendingPerIP bounds the connections not yet through the hello
	// from one source address (default 64, a full route's connections),
	// so one host cannot take every pending slot.
	MaxPendingPerIP int
	// WatchdogInterval is how often deadlines of in-flight work are checked.
	WatchdogInterval time.Duration
	// FrameTimeout bounds the time a WRITE's payload may take to arrive,
	// and a batch of READ payloads written from their regions to leave
	// (default 30 s). A revocation, a release or the end of the lease cuts
	// a stalled payload sooner. A batch whose READ payloads were copied
	// (at most 512 bytes each) holds no region and, like a batch of
	// answers without payload, is written without a deadline: a peer that
	// stops reading holds up only its own connection.
	FrameTimeout time.Duration
	// HeartbeatInterval: a connection that heard nothing for this long
	// sends a ping.
	HeartbeatInterval time.Duration
	// PeerTimeout: a connection silent this long (pings unanswered) fails
	// its route with ErrPeerGone.
	PeerTimeout time.Duration
	// SocketBuffer sets SO_SNDBUF/SO_RCVBUF when > 0.
	SocketBuffer int
	// Secret, when set, must be proven by every data connection (HMAC
	// over a fresh server nonce and the route token).
	Secret backend.Secret
	// AdvertiseHost, when AdvertiseAddr is empty, is the host peers dial,
	// with the listener's port (a wildcard listener otherwise advertises
	// loopback).
	AdvertiseHost string
	// TLS, when set, runs every data connection over TLS (--data-tls):
	// ServerTLS for the ones we accept (it should require client
	// certificates), ClientTLS for the ones we dial (ServerName defaults to
	// the dialled host). See tls.go.
	ServerTLS, ClientTLS *tls.Config
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		ListenAddr:        "127.0.0.1:0",
		ConnsPerRoute:     2,
		ChunkSize:         1 << 20,
		MaxFrameLen:       16 << 20,
		MaxInFlight:       1024,
		TokenTTL:          30 * time.Second,
		MaxPendingTokens:  4096,
		MaxTokensPerPeer:  256,
		HelloTimeout:      3 * time.Second,
		MaxServerConns:    4096,
		MaxConnsPerPeer:   256,
		IdleTimeout:       30 * time.Second,
		MaxPendingConns:   1024,
		MaxPendingPerIP:   64,
		WatchdogInterval:  20 * time.Millisecond,
		HeartbeatInterval: time.Second,
		FrameTimeout:      30 * time.Second,
		PeerTimeout:       4 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ListenAddr == "" {
		c.ListenAddr = d.ListenAddr
	}
	if c.ConnsPerRoute == 0 {
		c.ConnsPerRoute = d.ConnsPerRoute
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = d.ChunkSize
	}
	if c.MaxFrameLen == 0 {
		c.MaxFrameLen = d.MaxFrameLen
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = d.MaxInFlight
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = d.TokenTTL
	}
	if c.MaxPendingTokens == 0 {
		c.MaxPendingTokens = d.MaxPendingTokens
	}
	if c.MaxTokensPerPeer == 0 {
		c.MaxTokensPerPeer = d.MaxTokensPerPeer
	}
	if c.MaxConnsPerPeer == 0 {
		c.MaxConnsPerPeer = d.MaxConnsPerPeer
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = d.HelloTimeout
	}
	if c.MaxServerConns == 0 {
		c.MaxServerConns = d.MaxServerConns
	}
	if c.MaxPendingConns == 0 {
		c.MaxPendingConns = d.MaxPendingConns
	}
	if c.MaxPendingPerIP == 0 {
		c.MaxPendingPerIP = d.MaxPendingPerIP
	}
	if c.WatchdogInterval == 0 {
		c.WatchdogInterval = d.WatchdogInterval
	}
	if c.FrameTimeout == 0 {
		c.FrameTimeout = d.FrameTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = d.HeartbeatInterval
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = d.PeerTimeout
	}
	return c
}

// Verify rejects nonsense up front.
func (c Config) Verify() error {
	c = c.withDefaults()
	switch {
	case c.ConnsPerRoute < 1 || c.ConnsPerRoute > maxConns:
		return fmt.Errorf("tcp: ConnsPerRoute %d not in 1..%d", c.ConnsPerRoute, maxConns)
	case c.MaxFrameLen < 1 || c.MaxFrameLen > 1<<30:
		return fmt.Errorf("tcp: MaxFrameLen %d not in 1..1GiB", c.MaxFrameLen)
	case c.ChunkSize < 1 || c.ChunkSize > c.MaxFrameLen:
		return fmt.Errorf("tcp: ChunkSize %d not in 1..MaxFrameLen", c.ChunkSize)
	case c.MaxInFlight < 1:
		return fmt.Errorf("tcp: MaxInFlight %d < 1", c.MaxInFlight)
	case c.MaxServerConns < 1 || c.MaxPendingConns < 1 || c.MaxPendingPerIP < 1:
		return fmt.Errorf("tcp: MaxServerConns %d, MaxPendingConns %d, MaxPendingPerIP %d: want at least 1",
			c.MaxServerConns, c.MaxPendingConns, c.MaxPendingPerIP)
	case c.MaxTokensPerPeer < 1 || c.MaxConnsPerPeer < 1:
		return fmt.Errorf("tcp: MaxTokensPerPeer %d, MaxConnsPerPeer %d: want at least 1", c.MaxTokensPerPeer, c.MaxConnsPerPeer)
	case c.IdleTimeout < 0 || (c.IdleTimeout > 0 && c.IdleTimeout <= c.HeartbeatInterval):
		return fmt.Errorf("tcp: IdleTimeout %v must exceed HeartbeatInterval %v", c.IdleTimeout, c.HeartbeatInterval)
	case c.HelloTimeout < 0 || c.FrameTimeout < 0:
		return fmt.Errorf("tcp: negative HelloTimeout %v or FrameTimeout %v", c.HelloTimeout, c.FrameTimeout)
	case c.HeartbeatInterval < 0 || c.PeerTimeout < c.HeartbeatInterval:
		return fmt.Errorf("tcp: PeerTimeout %v must be at least HeartbeatInterval %v", c.PeerTimeout, c.HeartbeatInterval)
	}
	return nil
}
