package tcp

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Data-plane TLS (--data-tls). A data connection proves its route token
// (and the shared secret, when set) in the hello whether or not it runs
// over TLS; TLS adds confidentiality and a second proof, the deployment's
// certificates, on both ends. The handshake runs on the connection's first
// read or write, inside the hello deadline, so a client that never
// completes it holds a connection slot no longer than an unauthenticated
// one does. Go's crypto/tls has no kernel TLS offload: every byte is
// encrypted in user space (AES-GCM with hardware support on x86-64).

// wrapListener returns ln, or ln serving TLS when ServerTLS is set.
func (b *Backend) wrapListener(ln net.Listener) net.Listener {
	if b.cfg.ServerTLS == nil {
		return ln
	}
	return &tlsListener{Listener: ln, cfg: b.cfg.ServerTLS, bufSize: b.cfg.SocketBuffer}
}

type tlsListener struct {
	net.Listener
	cfg     *tls.Config
	bufSize int
}

// Accept sets the socket options on the TCP connection (setSockopts cannot
// see through a *tls.Conn) and wraps it.
func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	setSockopts(c, l.bufSize)
	return tls.Server(c, l.cfg), nil
}

// dial connects to a peer's data listener, over TLS when ClientTLS is set.
// A TLS handshake that fails is ErrUnauthenticated.
func (b *Backend) dial(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || b.cfg.ClientTLS == nil {
		return c, err
	}
	setSockopts(c, b.cfg.SocketBuffer)
	cfg := b.cfg.ClientTLS
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("tls: %w: %w", backend.ErrUnauthenticated, err)
	}
	return newTLSClientConn(tc), nil
}
