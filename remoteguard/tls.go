package remoteguard

import (
	"crypto/tls"
	"net"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rdmamgr/rdmamgr/internal/control"
)

type tlsOptions struct {
	serverTLS, clientTLS *tls.Config
	secret               Prover // secret.go; only without TLS
}

// WithTLS runs the control plane over mutual TLS: server for our gRPC
// server (it should require client certificates), client for the
// connections we dial (gRPC sets ServerName from the dialled address).
func WithTLS(server, client *tls.Config) Option {
	return func(o *options) { o.serverTLS, o.clientTLS = server, client }
}

func (o *tlsOptions) dialCredentials() credentials.TransportCredentials {
	if o.clientTLS == nil && o.secret != nil {
		return &secretCreds{TransportCredentials: insecure.NewCredentials(), s: o.secret}
	}
	if o.clientTLS == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(o.clientTLS)
}

// serverCredentials returns what the gRPC server's connection cap wraps:
// plain, sealed by the secret (secret.go), or TLS with its refusals
// counted in book.
func (o *tlsOptions) serverCredentials(book *control.Book) credentials.TransportCredentials {
	if o.serverTLS == nil && o.secret != nil {
		return &secretCreds{TransportCredentials: insecure.NewCredentials(), s: o.secret, book: book}
	}
	if o.serverTLS == nil {
		return insecure.NewCredentials()
	}
	return &tlsRefusals{TransportCredentials: credentials.NewTLS(o.serverTLS), book: book}
}

// tlsRefusals counts (and logs, sampled) the handshakes a TLS server
// refuses.
type tlsRefusals struct {
	credentials.TransportCredentials
	book *control.Book
}

func (c *tlsRefusals) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	nc, ai, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.book.Refuse(control.RefusedTLS, "control plane refused a peer at the TLS handshake",
			"peer", conn.RemoteAddr().String(), "err", err.Error())
	}
	return nc, ai, err
}

func (c *tlsRefusals) Clone() credentials.TransportCredentials {
	return &tlsRefusals{TransportCredentials: c.TransportCredentials.Clone(), book: c.book}
}
