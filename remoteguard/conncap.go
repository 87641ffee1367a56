package remoteguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/credentials"

	"github.com/rdmamgr/rdmamgr/internal/control"
)

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
	book       *control.Book

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
		c.book.Refuse(control.RefusedConn, "refused a control connection over the cap", "from", ip.String(), "conns", n, "from_ip", k)
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
