package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// pendingRoute is the initiator's route between PrepareRoute and Complete.
type pendingRoute struct {
	b    *Backend
	peer uint64
}

// Abort does nothing: nothing is held before Complete.
func (p *pendingRoute) Abort() {}

// Complete dials the responder's data address once per token,
// authenticates each connection and starts the route's goroutines.
func (p *pendingRoute) Complete(ctx context.Context, info []byte) (backend.Route, error) {
	addr, tokens, err := decodeResponderInfo(info)
	if err != nil {
		return nil, err
	}
	b := p.b
	r := newRoute(b, p.peer)
	r.farAgent = responderAgent(info)
	var d net.Dialer
	for i, tok := range tokens {
		c, err := b.dial(ctx, &d, addr) // tls.go
		if err != nil {
			r.closeConns()
			return nil, fmt.Errorf("tcp: dial %s: %w: %w", addr, rdmamgr.ErrPeerGone, err)
		}
		if err := hello(ctx, c, tok, b.cfg.Secret); err != nil {
			c.Close()
			r.closeConns()
			return nil, fmt.Errorf("tcp: connection %d to %s: %w", i, addr, err)
		}
		setSockopts(c, b.cfg.SocketBuffer)
		r.conns = append(r.conns, newClientConn(r, c))
	}
	if err := b.startRoute(r); err != nil {
		r.closeConns()
		return nil, err
	}
	return r, nil
}

// startRoute tracks r and its connections for Close and starts their
// goroutines, unless the backend is closed.
func (b *Backend) startRoute(r *route) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return rdmamgr.ErrClosed
	}
	b.routes[r] = struct{}{}
	for _, cc := range r.conns {
		b.conns[cc.c] = struct{}{}
	}
	b.wg.Add(1 + 2*len(r.conns))
	b.mu.Unlock()
	r.ioWG.Add(2 * len(r.conns))
	for _, cc := range r.conns {
		go cc.writeLoop()
		go cc.readLoop()
	}
	go r.watchdog()
	return nil
}

// hello proves tok on a freshly dialled data connection: it reads the
// server's challenge, answers with the token and its MAC over the nonce,
// and reads the server's verdict.
func hello(ctx context.Context, c net.Conn, tok [tokenSize]byte, secret backend.Secret) error {
	dl := time.Now().Add(10 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = c.SetDeadline(dl)
	var ch [challengeSize]byte
	if _, err := io.ReadFull(c, ch[:]); err != nil {
		return fmt.Errorf("challenge: %w: %w", rdmamgr.ErrPeerGone, err)
	}
	nonce, err := decodeChallenge(ch[:])
	if err != nil {
		return err
	}
	var h [helloSize]byte
	encodeHello(h[:], tok, helloMAC(secret, nonce, tok))
	if _, err := c.Write(h[:]); err != nil {
		return fmt.Errorf("hello: %w: %w", rdmamgr.ErrPeerGone, err)
	}
	var ack [helloAckSize]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fmt.Errorf("hello ack: %w: %w", rdmamgr.ErrPeerGone, err)
	}
	code, err := decodeHelloAck(ack[:])
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("hello refused: %w", codeErr(opWrite, code))
	}
	return c.SetDeadline(time.Time{})
}
