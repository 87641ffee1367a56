package remoteguard

import (
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/rdmamgr/rdmamgr/internal/control"
)

// Config hardens the gRPC server under protoactor remote. Zero fields
// take DefaultConfig's values.
//
// What a peer can make the server hold is bounded: at most MaxConns
// connections (MaxConnsPerIP from one address), each of which must finish
// its HTTP/2 handshake within HandshakeTimeout; at most MaxStreams Remoting
// streams server-wide (MaxStreamsPerConn per connection), each holding at
// most one message of MaxMessageSize being received (grpc-go ≥ 1.66 holds
// only the bytes that arrived, not the size a header announces). Peers
// that go silent are found by keepalive pings; connections without a
// stream are closed after MaxConnIdle.
type Config struct {
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

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
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

func (c Config) withDefaults() Config {
	d := DefaultConfig()
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

// DefaultMaxMessageSize bounds control messages on the gRPC transport (the
// manager's client checks the same limit before it sends).
const DefaultMaxMessageSize = control.DefaultMaxMessageSize

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
func (c Config) serverOptions(book *control.Book, creds credentials.TransportCredentials) []grpc.ServerOption {
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
		// Stop returns only once every stream handler has: nothing of a
		// stopped transport runs on.
		grpc.WaitForHandlers(true),
	}
}

// dialOptions keep our own client connections within what our servers
// enforce.
func (c Config) dialOptions(creds credentials.TransportCredentials, streams *streamSet) []grpc.DialOption {
	limit := c.MaxMessageSize + envelopeSlack
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit), grpc.MaxCallSendMsgSize(limit)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: c.KeepaliveTime, Timeout: c.KeepaliveTimeout, PermitWithoutStream: false}),
		grpc.WithChainStreamInterceptor(streams.closeConnWithStream),
	}
}
