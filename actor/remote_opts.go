package actor

import (
	"crypto/tls"
	"log/slog"
	"net"

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
// no port, the listener's port. Peers check that our messages' sender
// host is the IP their connection from us comes from (remote_origin.go),
// so advertise the address this host sends from toward its peers.
func WithAdvertise(host string) RemoteOption {
	return func(o *remoteOpts) { o.advertise = host }
}

// WithRemoteLogger receives StartRemote's own log lines (which address a
// wildcard bind advertises).
func WithRemoteLogger(l *slog.Logger) RemoteOption {
	return func(o *remoteOpts) { o.log = l }
}

// RefusedTLS: a peer failed the control plane's TLS handshake (no
// certificate, one from another CA, no TLS at all).
const RefusedTLS = "tls"

func (o *remoteOpts) dialCredentials() credentials.TransportCredentials {
	if o.clientTLS == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(o.clientTLS)
}

// serverCredentials returns what the gRPC server's connection cap wraps:
// plain, or TLS with its refusals counted in book.
func (o *remoteOpts) serverCredentials(book *refusals) credentials.TransportCredentials {
	if o.serverTLS == nil {
		return insecure.NewCredentials()
	}
	return &tlsRefusals{TransportCredentials: credentials.NewTLS(o.serverTLS), book: book}
}

// tlsRefusals counts (and logs, sampled) the handshakes a TLS server
// refuses.
type tlsRefusals struct {
	credentials.TransportCredentials
	book *refusals
}

func (c *tlsRefusals) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	nc, ai, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.book.refuse(RefusedTLS, "control plane refused a peer at the TLS handshake",
			"peer", conn.RemoteAddr().String(), "err", err.Error())
	}
	return nc, ai, err
}

func (c *tlsRefusals) Clone() credentials.TransportCredentials {
	return &tlsRefusals{TransportCredentials: c.TransportCredentials.Clone(), book: c.book}
}
