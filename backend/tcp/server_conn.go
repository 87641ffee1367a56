package tcp

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// serveConn authenticates a data connection and serves its requests in
// order until it fails. It returns when the connection is closed.
func (b *Backend) serveConn(c net.Conn, ip netip.Addr) {
	defer b.wg.Done()
	defer b.untrackConn(c)
	defer closeServed(c)
	peer, agent, ok := b.serverHello(c, ip)
	if !ok {
		return
	}
	defer b.authDone(peer)
	_ = c.SetDeadline(time.Time{})
	setSockopts(c, b.cfg.SocketBuffer)
	s := &serverConn{b: b, c: c, peer: b.peerJoin(peer), peerID: peer, peerAgent: agent}
	defer b.peerLeave(s.peer)
	if !b.trackServer(s) {
		return
	}
	defer b.untrackServer(s)
	if err := s.serve(); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		if ok, dropped := b.logs.closed.Allow(); ok {
			b.log.Warn("data connection closed", "remote", ip.String(), "err", err, "suppressed", dropped)
		}
	}
}

// serverHello runs the server's side of the hello on c: a fresh challenge,
// then the client's token and MAC over it, then the verdict. It gives back
// c's pending slot either way; with ok the connection took an
// authenticated slot (authDone gives it back) and peer is the manager the
// token was issued to (agent: a host agent's route, initiatorAgentBit).
func (b *Backend) serverHello(c net.Conn, ip netip.Addr) (peer uint64, agent, ok bool) {
	pending := true
	defer func() {
		if pending {
			b.helloDone(ip, 0, false)
		}
	}()
	deadline := time.Now().Add(b.cfg.HelloTimeout)
	_ = c.SetDeadline(deadline)
	if t, isTLS := c.(*tlsBufConn); isTLS {
		if err := t.handshake(deadline); err != nil {
			return 0, false, false // counted and logged by the handshake (tlsServerConn)
		}
	}
	var nonce [16]byte
	copy(nonce[:], backend.Nonce())
	var ch [challengeSize]byte
	encodeChallenge(ch[:], nonce)
	if _, err := c.Write(ch[:]); err != nil {
		return 0, false, false
	}
	var hello [helloSize]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		b.served.authFail.Add(1)
		if ok, dropped := b.logs.noHello.Allow(); ok {
			b.log.Warn("data connection without hello", "remote", ip.String(), "err", err, "suppressed", dropped)
		}
		return 0, false, false
	}
	peer, agent, err := b.checkHello(hello[:], nonce)
	if err == nil {
		pending = false
		if !b.helloDone(ip, peer, true) {
			err = fmt.Errorf("%d data connections served (at most %d per peer): %w", b.cfg.MaxServerConns, b.cfg.MaxConnsPerPeer, rdmamgr.ErrLimit)
		}
	}
	var ack [helloAckSize]byte
	if err != nil {
		b.served.authFail.Add(1)
		if ok, dropped := b.logs.refused.Allow(); ok {
			b.log.Warn("data connection refused", "remote", ip.String(), "err", err, "suppressed", dropped)
		}
		encodeHelloAck(ack[:], byte(backend.Code(err)))
		_, _ = c.Write(ack[:])
		return 0, false, false
	}
	encodeHelloAck(ack[:], 0)
	if _, err := c.Write(ack[:]); err != nil {
		b.authDone(peer)
		return 0, false, false
	}
	return peer, agent, true
}

// serveLinger bounds how long a served connection's close waits for what
// was written to it to leave (a TLS connection's buffer: tlsBufConn.drain).
const serveLinger = time.Second

// closeServed closes a connection serveConn served, once what was written
// to it left (for at most serveLinger).
func closeServed(c net.Conn) {
	if t, isTLS := c.(*tlsBufConn); isTLS {
		t.drain(serveLinger)
	}
	c.Close()
}

// checkHello verifies a hello against the challenge's nonce (when the
// secret is set) and consumes its token; it returns the token's peer and
// whether its route is a host agent's.
func (b *Backend) checkHello(hello []byte, nonce [16]byte) (peer uint64, agent bool, err error) {
	tok, mac, err := decodeHello(hello)
	if err != nil {
		return 0, false, err
	}
	if b.cfg.Secret.Enabled() {
		want := helloMAC(b.cfg.Secret, nonce, tok)
		if !hmac.Equal(mac[:], want[:]) {
			return 0, false, fmt.Errorf("hello does not prove the secret: %w", rdmamgr.ErrUnauthenticated)
		}
	}
	e, ok := b.takeToken(tok)
	if !ok {
		return 0, false, fmt.Errorf("unknown, used or expired token: %w", rdmamgr.ErrUnauthenticated)
	}
	return e.peer, e.agent, nil
}

func (b *Backend) authDone(peer uint64) {
	b.mu.Lock()
	b.authed--
	if k := b.authByPeer[peer] - 1; k > 0 {
		b.authByPeer[peer] = k
	} else {
		delete(b.authByPeer, peer)
	}
	b.mu.Unlock()
}

func (b *Backend) trackServer(s *serverConn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.srv[s] = struct{}{}
	return true
}

func (b *Backend) untrackServer(s *serverConn) {
	b.mu.Lock()
	delete(b.srv, s)
	b.mu.Unlock()
}

// cutRegion is b's memreg.Cutter (newTCP): a served connection stalled in r's
// memory (a WRITE payload that stopped arriving, a batch of READ payloads
// the peer stopped reading) is woken to check RemoteErr again, so the
// registry's wait for r's remote requests is short.
func (b *Backend) cutRegion(r *memreg.Region) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.srv {
		s.cut(r)
	}
}

func setSockopts(c net.Conn, bufSize int) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(true)
	if bufSize > 0 {
		_ = tc.SetReadBuffer(bufSize)
		_ = tc.SetWriteBuffer(bufSize)
	}
}
