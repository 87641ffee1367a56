//go:build linux

package shm

import (
	"net"

	"github.com/rdmamgr/rdmamgr/backend/internal/logsample"
)

// Caps on the socket, so no process of the host can take the owner's fds
// or memory by connecting (every process in the network namespace can
// reach an abstract socket).
const (
	// maxPreAuth bounds the connections that have not yet proved a token,
	// in all; maxPreAuthPerUID those of one user. Each is also bounded in
	// time by handshakeTimeout.
	maxPreAuth       = 64
	maxPreAuthPerUID = 16
	// maxConns bounds the authenticated connections (routes served), in
	// all; maxRoutesPerPeer the tokens waiting plus the connections of one
	// peer manager: each connection costs a state table (512 KiB) and fds.
	maxConns         = 1024
	maxRoutesPerPeer = 64
)

// admit decides, at accept, whether c may start its handshake: its user
// must be one we serve (SO_PEERCRED: the kernel's word) and the pre-auth
// caps must have room. It returns the uid to give back with preAuthDone.
func (b *Backend) admit(c *net.UnixConn) (uint32, bool) {
	_, uid, err := peerCred(c)
	if err != nil {
		b.refuseConn("no peer credentials", "err", err)
		return 0, false
	}
	if !b.uidAllowed(uid) {
		b.refuseConn("user not served", "uid", uid)
		return 0, false
	}
	b.mu.Lock()
	if b.closed || b.preAuth >= maxPreAuth || b.preAuthUID[uid] >= maxPreAuthPerUID {
		n, nu, closed := b.preAuth, b.preAuthUID[uid], b.closed
		b.mu.Unlock()
		if !closed {
			b.refuseConn("too many connections before authentication", "uid", uid, "pending", n, "pending_of_uid", nu)
		}
		return 0, false
	}
	b.preAuth++
	b.preAuthUID[uid]++
	b.mu.Unlock()
	return uid, true
}

// preAuthDone gives back a connection's pre-auth slot.
func (b *Backend) preAuthDone(uid uint32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.preAuth--
	if n := b.preAuthUID[uid] - 1; n > 0 {
		b.preAuthUID[uid] = n
	} else {
		delete(b.preAuthUID, uid)
	}
}

// routesOf counts peer's tokens waiting and connections authenticated;
// b.mu is held.
func (b *Backend) routesOf(peer uint64) int {
	n := 0
	for _, t := range b.tokens {
		if t.peerID == peer {
			n++
		}
	}
	return n + b.authedPeer[peer]
}

// refuseConn counts a connection refused at accept and logs it (sampled).
func (b *Backend) refuseConn(why string, args ...any) {
	b.authFail.Add(1)
	b.refusedAccept.Add(1)
	if ok, dropped := b.logs.refused.Allow(); ok {
		b.log.Warn("shm connection refused: "+why, append(args, "suppressed", dropped)...)
	}
}

// logSampler bounds log lines about peers (package logsample).
type logSampler = logsample.Sampler

// logs are the backend's sampled warnings.
type logs struct {
	refused, ended, accept logSampler
}
