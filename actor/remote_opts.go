package actor

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// RemoteOption configures StartRemote beyond its address and limits.
type RemoteOption func(*remoteOpts)

type remoteOpts struct {
	serverTLS, clientTLS *tls.Config
	advertise            string
	log                  *slog.Logger
}

// WithTLS runs the control plane over mutual TLS: server for our gRPC
// server (it should require client certificates), client for the
// connections we dial (gRPC sets ServerName from the dialled address).
func WithTLS(server, client *tls.Config) RemoteOption {
	return func(o *remoteOpts) { o.serverTLS, o.clientTLS = server, client }
}

// WithAdvertise sets the host (or host:port) peers use to reach us; with
// no port, the listener's port.
func WithAdvertise(host string) RemoteOption {
	return func(o *remoteOpts) { o.advertise = host }
}

// WithRemoteLogger receives the control plane's refusal logs (sampled).
func WithRemoteLogger(l *slog.Logger) RemoteOption {
	return func(o *remoteOpts) { o.log = l }
}

func (o *remoteOpts) dialCredentials() grpc.DialOption {
	if o.clientTLS == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(o.clientTLS))
}

func (o *remoteOpts) serverOptions() []grpc.ServerOption {
	if o.serverTLS == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(&refusalCounter{
		TransportCredentials: credentials.NewTLS(o.serverTLS),
		log:                  o.log,
	})}
}

// controlRefusals counts TLS handshakes the control plane refused, in this
// process (a process runs one remote).
var controlRefusals atomic.Uint64

// ControlRefusals returns how many peers the control plane refused at the
// TLS handshake (no certificate, one from another CA, no TLS at all).
func ControlRefusals() uint64 { return controlRefusals.Load() }

// refusalCounter counts and logs (at most one line per refusalLogEvery,
// with the number left out) the handshakes a TLS server refuses.
type refusalCounter struct {
	credentials.TransportCredentials
	log *slog.Logger
}

const refusalLogEvery = 10 * time.Second

var refusalLog struct {
	mu         sync.Mutex // guards the fields below
	last       time.Time
	suppressed uint64
}

func (c *refusalCounter) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	nc, ai, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		n := controlRefusals.Add(1)
		c.logRefusal(conn.RemoteAddr().String(), err, n)
	}
	return nc, ai, err
}

func (c *refusalCounter) logRefusal(peer string, err error, total uint64) {
	if c.log == nil {
		return
	}
	refusalLog.mu.Lock()
	now := time.Now()
	if now.Sub(refusalLog.last) < refusalLogEvery {
		refusalLog.suppressed++
		refusalLog.mu.Unlock()
		return
	}
	skipped := refusalLog.suppressed
	refusalLog.last, refusalLog.suppressed = now, 0
	refusalLog.mu.Unlock()
	c.log.LogAttrs(context.Background(), slog.LevelWarn, "control plane refused a peer at the TLS handshake",
		slog.String("peer", peer), slog.String("err", err.Error()),
		slog.Uint64("refused_total", total), slog.Uint64("not_logged_since_last", skipped))
}

func (c *refusalCounter) Clone() credentials.TransportCredentials {
	return &refusalCounter{TransportCredentials: c.TransportCredentials.Clone(), log: c.log}
}
