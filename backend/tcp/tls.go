package tcp

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr"
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
	return &tlsListener{Listener: ln, b: b}
}

type tlsListener struct {
	net.Listener
	b *Backend
}

// Accept sets the socket options on the TCP connection (setSockopts cannot
// see through a *tls.Conn) and wraps it: TLS over rawConn, then
// tlsBufConn (tls_writer.go), so that the cut grace can interrupt a
// stalled write of a batch and the batch can go on.
func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	setSockopts(c, l.b.cfg.SocketBuffer)
	raw := &rawConn{Conn: c}
	return newTLSBufConn(&tlsServerConn{Conn: tls.Server(raw, l.b.cfg.ServerTLS), b: l.b}, raw), nil
}

// tlsServerConn runs the handshake on first use, inside the deadline the
// server set for the hello, and counts a failed one as an authentication
// failure (logged at most once per refusalLogEvery).
type tlsServerConn struct {
	*tls.Conn
	b    *Backend
	once sync.Once
	err  error
}

func (c *tlsServerConn) handshake() error {
	c.once.Do(func() {
		if err := c.Conn.Handshake(); err != nil {
			c.err = fmt.Errorf("tls: %w: %w", rdmamgr.ErrUnauthenticated, err)
			n := c.b.served.authFail.Add(1)
			if refusals.allow() {
				c.b.log.Warn("data connection refused at the TLS handshake", "remote", c.RemoteAddr().String(),
					"err", err, "auth_failures_total", n)
			}
		}
	})
	return c.err
}

func (c *tlsServerConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *tlsServerConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// refusals rate-limits the refusal log of the data plane's TLS.
var refusals sampler

const refusalLogEvery = 10 * time.Second

type sampler struct {
	mu   sync.Mutex // guards last
	last time.Time
}

func (s *sampler) allow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Sub(s.last) >= refusalLogEvery {
		s.last = now
		return true
	}
	return false
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
	raw := &rawConn{Conn: c}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("tls: %w: %w", rdmamgr.ErrUnauthenticated, err)
	}
	return newTLSBufConn(tc, raw), nil
}
