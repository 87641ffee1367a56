//go:build linux

package hostagent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// attach runs c's handshake (package doc) and then serves the process
// until it goes.
func (a *Agent) attach(c *net.UnixConn) {
	defer a.wg.Done()
	p, err := a.handshake(c)
	a.preAuthDone()
	if err != nil {
		a.log.Warn("attach refused", "err", err)
		sendGone(c, err, "attach refused: "+err.Error())
		c.Close()
		return
	}
	a.log.Info("process attached", "pid", p.pid, "manager", fmt.Sprintf("%016x", p.id), "addr", p.addr, "slot", p.slot, "generation", p.gen)
	p.run()
}

// handshake authenticates the process on c, sets up our shm route to it
// and gives it a slot. On error it has undone what it made.
func (a *Agent) handshake(c *net.UnixConn) (*proc, error) {
	ctx, cancel := context.WithTimeout(a.life, handshakeTimeout)
	defer cancel()
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	// Close (a.life) ends a handshake waiting on the process at once.
	// (Deferred after cancel: it runs first, so our own cancel at return
	// does not fire it.)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	h := agentwire.Hello{AgentID: a.mgr.ID()}
	_, _ = rand.Read(h.Nonce[:])
	pkt, err := h.Encode()
	if err != nil {
		return nil, err
	}
	if err := agentwire.WritePacket(c, pkt); err != nil {
		return nil, err
	}
	buf := make([]byte, agentwire.MaxPacket)
	if pkt, err = agentwire.ReadPacket(c, buf); err != nil {
		return nil, handshakeErr("no auth", err)
	}
	auth, err := agentwire.DecodeAuth(pkt)
	if err != nil {
		return nil, err
	}
	if err := auth.Verify(a.cfg.Secret, h.Nonce); err != nil {
		return nil, err
	}
	pid, uid, err := agentwire.PeerCred(c)
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %v: %w", err, rdmamgr.ErrUnauthenticated)
	}
	if uint32(pid) != auth.PID {
		return nil, fmt.Errorf("pid %d claimed, the kernel says %d: %w", auth.PID, pid, rdmamgr.ErrUnauthenticated)
	}
	if !a.uidServed(uid) {
		return nil, fmt.Errorf("uid %d not served: %w", uid, rdmamgr.ErrUnauthenticated)
	}
	if err := a.slotLeft(); err != nil { // before the shm handshake's work
		return nil, err
	}
	route, err := a.shmRoute(ctx, c, buf, auth.ManagerID)
	if err != nil {
		return nil, err
	}
	p := newProc(a, c, &auth, uid, route)
	if err := a.takeSlot(p); err != nil {
		sendGone(c, err, "attach refused: "+err.Error()) // before abandon closes c
		p.abandon(err)
		return nil, err
	}
	hid := a.cfg.HostID
	w := agentwire.Welcome{Slot: p.slot, Generation: p.gen, AgentAddr: a.addr, AgentID: a.mgr.ID(), HostID: hid}
	pkt, err = w.Encode()
	if err == nil {
		err = agentwire.WritePacket(c, pkt)
	}
	if err != nil {
		p.abandon(err)
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return p, nil
}

// shmRoute runs the shm route handshake over c, the agent initiating:
// our PrepareRoute info out, the process's AcceptRoute answer in, then
// Complete (which connects to the process's shm socket).
func (a *Agent) shmRoute(ctx context.Context, c *net.UnixConn, buf []byte, peerID uint64) (backend.Route, error) {
	pr, info, err := a.shm.PrepareRoute(ctx, peerID)
	if err != nil {
		return nil, fmt.Errorf("shm prepare: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			pr.Abort()
		}
	}()
	pkt, err := agentwire.EncodeInfo(agentwire.TypeShmPrepare, info)
	if err != nil {
		return nil, err
	}
	if err := agentwire.WritePacket(c, pkt); err != nil {
		return nil, err
	}
	if pkt, err = agentwire.ReadPacket(c, buf); err != nil {
		return nil, handshakeErr("no shm answer", err)
	}
	if t, _ := agentwire.Type(pkt); t == agentwire.TypeGone {
		g, err := agentwire.DecodeGone(pkt)
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("process refused: %w", g.Err())
	}
	answer, err := agentwire.DecodeInfo(agentwire.TypeShmAccept, pkt)
	if err != nil {
		return nil, err
	}
	ok = true // Complete aborts on error itself
	r, err := pr.Complete(ctx, answer)
	if err != nil {
		return nil, fmt.Errorf("shm route: %w", err)
	}
	if _, isProxy := r.(wiring.ProxyRoute); !isProxy {
		r.Close()
		return nil, fmt.Errorf("shm route %T maps no proxies: %w", r, rdmamgr.ErrNotSupported)
	}
	return r, nil
}

// handshakeErr says why a handshake read failed: ErrDeadline when the
// process took too long, ErrPeerGone when it went, else the error.
func handshakeErr(what string, err error) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s within %v: %w", what, handshakeTimeout, rdmamgr.ErrDeadline)
	case errors.Is(err, rdmamgr.ErrProtocol):
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %v: %w", what, err, rdmamgr.ErrPeerGone)
}

// sendGone tells the process why we close (best effort, not waiting).
func sendGone(c *net.UnixConn, err error, reason string) {
	code := uint32(backend.Code(err))
	if code == 0 {
		code = uint32(backend.Code(rdmamgr.ErrPeerGone))
	}
	if len(reason) > agentwire.MaxReason {
		reason = reason[:agentwire.MaxReason]
	}
	g := agentwire.Gone{Code: code, Reason: printable(reason)}
	pkt, gerr := g.Encode()
	if gerr != nil {
		return
	}
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_ = agentwire.WritePacket(c, pkt)
}

// printable replaces what agentwire refuses in a reason (control
// characters, invalid UTF-8).
func printable(s string) string {
	b := []rune{}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			r = '?'
		}
		b = append(b, r)
	}
	return string(b)
}
