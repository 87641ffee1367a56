//go:build linux

package hostagent

import (
	"errors"
	"net"
	"slices"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// Caps of the attach socket, as shm's: at most maxPreAuth connections in
// their handshake, each for at most handshakeTimeout.
const maxPreAuth = 64

// handshakeTimeout bounds an attach handshake (a variable for tests).
var handshakeTimeout = 5 * time.Second

func (a *Agent) acceptLoop(ln *net.UnixListener) {
	defer a.wg.Done()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			a.log.Warn("accept", "err", err)
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		if !a.admit(c) {
			c.Close()
			continue
		}
		a.wg.Add(1)
		go a.attach(c)
	}
}

// admit decides at accept whether c may start its handshake: its user
// must be one we serve (SO_PEERCRED) and fewer than maxPreAuth be in
// their handshake. attach gives the slot back (preAuthDone).
func (a *Agent) admit(c *net.UnixConn) bool {
	_, uid, err := agentwire.PeerCred(c)
	if err != nil {
		a.log.Warn("attach refused: no peer credentials", "err", err)
		return false
	}
	if !a.uidServed(uid) {
		a.log.Warn("attach refused: user not served", "uid", uid)
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.preAuth >= maxPreAuth {
		if !a.closed {
			a.log.Warn("attach refused: too many handshakes", "pending", a.preAuth)
		}
		return false
	}
	a.preAuth++
	return true
}

func (a *Agent) preAuthDone() {
	a.mu.Lock()
	a.preAuth--
	a.mu.Unlock()
}

// uidServed reports whether processes of uid may attach: ours and
// Config.AllowUIDs.
func (a *Agent) uidServed(uid uint32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(uid) == a.uid || slices.Contains(a.cfg.AllowUIDs, int(uid))
}
