package tcp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/rdmamgr/rdmamgr/backend/internal/logsample"
)

// The accept side of the data listener. Two ideas keep it alive under a
// hostile network:
//
//   - Accept errors that mean "short of something" (EMFILE, ENFILE,
//     ENOBUFS, ENOMEM, ECONNABORTED, a network error of a pending
//     connection) are retried with a backoff, as net/http's Server.Serve
//     does: 5 ms, doubling to 1 s, reset by the next success. Only errors
//     that say the listening socket itself is gone end the loop; the
//     listener is then marked down (Addr, Listener) and AcceptRoute refuses
//     with ErrListenerDown instead of handing out a dead address.
//   - Connections that have not finished the hello are admitted against
//     their own small caps (MaxPendingConns in all, MaxPendingPerIP per
//     source address) and have HelloTimeout to finish; they never take an
//     authenticated slot (MaxServerConns), so silent connections cannot
//     starve routes.
//   - Authenticated connections are capped per peer (MaxConnsPerPeer),
//     and a full table makes room for a peer holding fewer by closing one
//     of the heaviest peer's; one silent for IdleTimeout is closed
//     (server_frames.go).

// Backoff bounds of Accept retries (net/http's).
const (
	acceptMinDelay = 5 * time.Millisecond
	acceptMaxDelay = time.Second
)

// ListenerState is the data listener's health, for status and metrics.
type ListenerState struct {
	// Err is why the listener is down for good; nil while it serves.
	Err error
	// AcceptRetries counts Accept errors retried after a backoff.
	AcceptRetries uint64
	// Pending is the number of connections not yet through the hello.
	Pending int
	// Authenticated is the number of connections past the hello.
	Authenticated int
	// RefusedPending counts connections closed at once because the
	// pending caps were full; RefusedFull those refused after the hello
	// because MaxServerConns connections were served (and no peer held
	// more than theirs); RefusedPeer those refused because their peer
	// held MaxConnsPerPeer.
	RefusedPending, RefusedFull, RefusedPeer uint64
	// ConnsEvicted counts connections closed to make room for a peer
	// holding fewer; TokensEvicted pending tokens dropped likewise.
	ConnsEvicted, TokensEvicted uint64
}

// Listener returns the data listener's state.
func (b *Backend) Listener() ListenerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return ListenerState{
		Err:            b.lnErr,
		AcceptRetries:  b.lnStats.acceptRetries.Load(),
		Pending:        b.pending,
		Authenticated:  b.authed,
		RefusedPending: b.lnStats.refusedPending.Load(),
		RefusedFull:    b.lnStats.refusedFull.Load(),
		RefusedPeer:    b.lnStats.refusedPeer.Load(),
		ConnsEvicted:   b.lnStats.connsEvicted.Load(),
		TokensEvicted:  b.lnStats.tokensEvicted.Load(),
	}
}

// acceptLoop accepts data connections until ln is closed by Close or fails
// for good (see the top of this file).
func (b *Backend) acceptLoop(ln net.Listener) {
	defer b.wg.Done()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if b.isClosed() {
				return
			}
			if !retryAccept(err) {
				b.listenerDown(err)
				return
			}
			delay = acceptBackoff(delay)
			b.lnStats.acceptRetries.Add(1)
			if ok, dropped := b.logs.acceptErr.Allow(); ok {
				b.log.Warn("accept failed; retrying", "err", err, "delay", delay, "suppressed", dropped)
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-b.done:
				t.Stop()
				return
			}
			continue
		}
		delay = 0
		b.admit(c)
	}
}

// acceptBackoff returns the delay after an Accept error that followed a
// delay of prev (0 after a success).
func acceptBackoff(prev time.Duration) time.Duration {
	if prev == 0 {
		return acceptMinDelay
	}
	return min(2*prev, acceptMaxDelay)
}

// retryAccept reports whether an Accept error may pass: everything but
// errors that say the listening socket itself is unusable.
func retryAccept(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EBADF, syscall.EINVAL, syscall.ENOTSOCK, syscall.EFAULT:
			return false
		}
		return true // EMFILE, ENFILE, ENOBUFS, ENOMEM, ECONNABORTED, EPROTO, ...
	}
	var te interface{ Temporary() bool }
	if errors.As(err, &te) && te.Temporary() {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// listenerDown records that the listener failed for good.
func (b *Backend) listenerDown(err error) {
	b.mu.Lock()
	b.lnErr = err
	addr := b.addr
	b.mu.Unlock()
	b.log.Error("data listener down; routes are refused until restart", "addr", addr, "err", err)
}

func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// admit starts serving c unless the pending caps are full.
func (b *Backend) admit(c net.Conn) {
	ip := remoteIP(c)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		c.Close()
		return
	}
	if b.pending >= b.cfg.MaxPendingConns || b.pendingByIP[ip] >= b.cfg.MaxPendingPerIP {
		n, nIP := b.pending, b.pendingByIP[ip]
		b.mu.Unlock()
		// Counted before the close: whoever sees the connection closed
		// sees it counted.
		b.lnStats.refusedPending.Add(1)
		b.served.authFail.Add(1)
		c.Close()
		if ok, dropped := b.logs.refused.Allow(); ok {
			b.log.Warn("data connection refused: too many before the hello",
				"remote", ip.String(), "pending", n, "pending_from_addr", nIP, "suppressed", dropped)
		}
		return
	}
	b.pending++
	b.pendingByIP[ip]++
	b.conns[c] = struct{}{}
	b.wg.Add(1)
	b.mu.Unlock()
	go b.serveConn(c, ip)
}

// helloDone gives back c's pending slot; when ok (the hello proved a
// token of peer) it takes an authenticated slot, and reports false if
// peer holds MaxConnsPerPeer already, or MaxServerConns are served and
// no peer holds more than peer would (see makeRoomLocked).
func (b *Backend) helloDone(ip netip.Addr, peer uint64, ok bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending--
	if n := b.pendingByIP[ip] - 1; n > 0 {
		b.pendingByIP[ip] = n
	} else {
		delete(b.pendingByIP, ip)
	}
	if !ok {
		return false
	}
	if b.authByPeer[peer] >= b.cfg.MaxConnsPerPeer {
		b.lnStats.refusedPeer.Add(1)
		return false
	}
	if b.authed >= b.cfg.MaxServerConns && !b.makeRoomLocked(peer) {
		b.lnStats.refusedFull.Add(1)
		return false
	}
	b.authed++
	b.authByPeer[peer]++
	return true
}

// makeRoomLocked closes one served connection of the peer holding the
// most, if it holds more than peer would with one more: a full table
// takes a newcomer's connection at the expense of the heaviest peer, never
// of a peer with fewer. The closed connection gives its slot back when its
// goroutine ends; until then the count may pass MaxServerConns by the
// connections being closed.
func (b *Backend) makeRoomLocked(peer uint64) bool {
	var heavy uint64
	most := 0
	for p, k := range b.authByPeer {
		if p != peer && k > most {
			heavy, most = p, k
		}
	}
	if most <= b.authByPeer[peer]+1 {
		return false
	}
	for s := range b.srv {
		if s.peerID == heavy && !s.evicted {
			s.evicted = true
			s.c.Close()
			b.lnStats.connsEvicted.Add(1)
			return true
		}
	}
	return false
}

// remoteIP is the source address of c (the zero Addr if unknown: such
// connections share one per-address cap).
func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// logSampler bounds log lines about peers (package logsample).
type logSampler = logsample.Sampler

func (s ListenerState) String() string {
	st := "up"
	if s.Err != nil {
		st = "down: " + s.Err.Error()
	}
	return fmt.Sprintf("listener %s, %d pending, %d authenticated, %d accept retries, refused %d pending %d full %d per peer, evicted %d connections %d tokens",
		st, s.Pending, s.Authenticated, s.AcceptRetries, s.RefusedPending, s.RefusedFull, s.RefusedPeer, s.ConnsEvicted, s.TokensEvicted)
}
