package actor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/rdmamgr/rdmamgr"
)

// RemoteConfig hardens the gRPC server under protoactor remote. Zero fields
// take DefaultRemoteConfig's values.
//
// What a peer can make the server hold is bounded: at most MaxConns
// connections (MaxConnsPerIP from one address), each of which must finish
// its HTTP/2 handshake within HandshakeTimeout; at most MaxStreams Remoting
// streams server-wide (MaxStreamsPerConn per connection), each holding at
// most one message of MaxMessageSize being received (grpc-go ≥ 1.66 holds
// only the bytes that arrived, not the size a header announces). Peers
// that go silent are found by keepalive pings; connections without a
// stream are closed after MaxConnIdle.
type RemoteConfig struct {
	// MaxMessageSize bounds a control message, both ways
	// (DefaultMaxMessageSize).
	MaxMessageSize int
	// MaxConns bounds the gRPC connections served at once (256).
	MaxConns int
	// MaxConnsPerIP bounds them per source address (32).
	MaxConnsPerIP int
	// MaxStreams bounds the Remoting streams served at once (256); a
	// protoactor peer keeps one open per connection.
	MaxStreams int
	// MaxStreamsPerConn is HTTP/2's MAX_CONCURRENT_STREAMS (4).
	MaxStreamsPerConn uint32
	// HandshakeTimeout bounds a new connection's HTTP/2 handshake (5 s).
	HandshakeTimeout time.Duration
	// KeepaliveTime: the server pings a peer silent this long (30 s), and
	// closes the connection when no answer comes within KeepaliveTimeout
	// (10 s). Peers may ping at most every KeepaliveMinTime (10 s).
	KeepaliveTime, KeepaliveTimeout, KeepaliveMinTime time.Duration
	// MaxConnIdle closes a connection without streams this long (2 min).
	MaxConnIdle time.Duration
}

// DefaultRemoteConfig returns the defaults.
func DefaultRemoteConfig() RemoteConfig {
	return RemoteConfig{
		MaxMessageSize:    DefaultMaxMessageSize,
		MaxConns:          256,
		MaxConnsPerIP:     32,
		MaxStreams:        256,
		MaxStreamsPerConn: 4,
		HandshakeTimeout:  5 * time.Second,
		KeepaliveTime:     30 * time.Second,
		KeepaliveTimeout:  10 * time.Second,
		KeepaliveMinTime:  10 * time.Second,
		MaxConnIdle:       2 * time.Minute,
	}
}

func (c RemoteConfig) withDefaults() RemoteConfig {
	d := DefaultRemoteConfig()
	setIfZero(&c.MaxMessageSize, d.MaxMessageSize)
	setIfZero(&c.MaxConns, d.MaxConns)
	setIfZero(&c.MaxConnsPerIP, d.MaxConnsPerIP)
	setIfZero(&c.MaxStreams, d.MaxStreams)
	setIfZero(&c.MaxStreamsPerConn, d.MaxStreamsPerConn)
	setIfZero(&c.HandshakeTimeout, d.HandshakeTimeout)
	setIfZero(&c.KeepaliveTime, d.KeepaliveTime)
	setIfZero(&c.KeepaliveTimeout, d.KeepaliveTimeout)
	setIfZero(&c.KeepaliveMinTime, d.KeepaliveMinTime)
	setIfZero(&c.MaxConnIdle, d.MaxConnIdle)
	return c
}

func setIfZero[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// envelopeSlack is room for protoactor's batch around our messages.
const envelopeSlack = 64 << 10

// serverOptions returns the gRPC server options of c (the guard's come
// separately).
func (c RemoteConfig) serverOptions(book *refusals, creds credentials.TransportCredentials) []grpc.ServerOption {
	limit := c.MaxMessageSize + envelopeSlack
	return []grpc.ServerOption{
		grpc.Creds(&connCap{TransportCredentials: creds, max: c.MaxConns, perIP: c.MaxConnsPerIP,
			byIP: make(map[netip.Addr]int), book: book}),
		grpc.MaxRecvMsgSize(limit),
		grpc.MaxSendMsgSize(limit),
		grpc.MaxConcurrentStreams(c.MaxStreamsPerConn),
		grpc.MaxHeaderListSize(16 << 10),
		grpc.ConnectionTimeout(c.HandshakeTimeout),
		// Fixed windows (no BDP growth): what a connection may send ahead
		// of our reading stays small.
		grpc.InitialWindowSize(256 << 10),
		grpc.InitialConnWindowSize(1 << 20),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: c.MaxConnIdle,
			Time:              c.KeepaliveTime,
			Timeout:           c.KeepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.KeepaliveMinTime, PermitWithoutStream: true}),
	}
}

// dialOptions keep our own client connections within what our servers
// enforce.
func (c RemoteConfig) dialOptions(creds credentials.TransportCredentials) []grpc.DialOption {
	limit := c.MaxMessageSize + envelopeSlack
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit), grpc.MaxCallSendMsgSize(limit)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: c.KeepaliveTime, Timeout: c.KeepaliveTimeout, PermitWithoutStream: false}),
		grpc.WithChainStreamInterceptor(closeConnWithStream),
	}
}

// ErrTooManyConns: a gRPC connection over the connection caps (it is
// closed at once). It is rdmamgr.ErrLimit.
var ErrTooManyConns = rdmamgr.ErrLimit

// connCap is plaintext transport credentials that count connections and
// refuse those over the caps during the (empty) security handshake, so a
// refused connection is closed before grpc-go allocates anything for it.
// protoactor opens the listener itself, so the cap cannot wrap it.
//
// A connection stops counting when grpc-go closes it or when a read on it
// fails (a failed HTTP/2 handshake is closed by grpc-go under the raw
// connection, past the wrapper; the failed read comes first).
type connCap struct {
	credentials.TransportCredentials
	max, perIP int
	book       *refusals

	mu   sync.Mutex // guards the fields below
	n    int
	byIP map[netip.Addr]int
}

func (c *connCap) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	ip := addrOf(raw.RemoteAddr())
	c.mu.Lock()
	n, k := c.n, c.byIP[ip]
	if n >= c.max || k >= c.perIP {
		c.mu.Unlock()
		c.book.refuse(RefusedConn, "refused a control connection over the cap", "from", ip.String(), "conns", n, "from_ip", k)
		return nil, nil, fmt.Errorf("%d connections, %d from %s (serve --grpc-max-conns, --grpc-max-conns-per-ip): %w", n, k, ip, ErrTooManyConns)
	}
	c.n++
	c.byIP[ip]++
	c.mu.Unlock()
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		c.release(ip)
		return nil, nil, err
	}
	return &countedConn{Conn: conn, release: func() { c.release(ip) }}, info, nil
}

func (c *connCap) release(ip netip.Addr) {
	c.mu.Lock()
	c.n--
	if c.byIP[ip]--; c.byIP[ip] <= 0 {
		delete(c.byIP, ip)
	}
	c.mu.Unlock()
}

// Clone returns c itself: a clone must count against the same caps.
func (c *connCap) Clone() credentials.TransportCredentials { return c }

// countedConn releases its slot once, on Close or on the first failed read.
type countedConn struct {
	net.Conn
	release func()
	done    atomic.Bool
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.end()
	}
	return n, err
}

func (c *countedConn) Close() error {
	c.end()
	return c.Conn.Close()
}

func (c *countedConn) end() {
	if c.done.CompareAndSwap(false, true) {
		c.release()
	}
}

// ClientHandshake is not used on the server; it keeps the interface whole.
func (c *connCap) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TransportCredentials.ClientHandshake(ctx, authority, raw)
}
