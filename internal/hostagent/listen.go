//go:build linux

package hostagent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Caps of the attach socket, as shm's: at most maxPreAuth connections in
// their handshake, each for at most handshakeTimeout.
const maxPreAuth = 64

// handshakeTimeout bounds an attach handshake (a variable for tests).
var handshakeTimeout = 5 * time.Second

// listen listens on path (SOCK_SEQPACKET), mode 0660. A socket file left
// by an agent that died is removed first: only when nobody answers on it.
func listen(path string) (*net.UnixListener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("hostagent: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("hostagent: %s: another agent listens there", path)
		}
		os.Remove(path)
	}
	// Between bind and chmod the umask's mode holds; a user let in by it
	// is still refused at accept (admit: SO_PEERCRED).
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("hostagent: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("hostagent: chmod %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	return ln, nil
}

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
	_, uid, err := peerCred(c)
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
	return int(uid) == a.uid || slices.Contains(a.cfg.AllowUIDs, int(uid))
}

// peerCred returns the pid and uid of the process at the other end.
func peerCred(c *net.UnixConn) (pid int32, uid uint32, err error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if serr != nil {
		return 0, 0, serr
	}
	return cred.Pid, cred.Uid, nil
}
