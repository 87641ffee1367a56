//go:build linux

package shm

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// PrepareRoute starts a route as initiator: our host, pid and uid, and the
// fallback backend's own endpoint info.
func (b *Backend) PrepareRoute(ctx context.Context, peerID uint64) (backend.PendingRoute, []byte, error) {
	if err := b.ready(); err != nil {
		return nil, nil, err
	}
	info := routeInfo{host: b.host, pid: uint32(os.Getpid()), uid: uint32(b.uid)}
	pr := &pendingRoute{b: b, peerID: peerID}
	if fb := b.cfg.Fallback; fb != nil {
		fpr, fi, err := fb.PrepareRoute(ctx, peerID)
		if err != nil {
			return nil, nil, fmt.Errorf("shm: fallback %s: %w", fb.Kind(), err)
		}
		pr.fb, info.fbKind, info.fb = fpr, string(fb.Kind()), fi
	}
	return pr, info.encode(), nil
}

// AcceptRoute answers an initiator on this host: a token for our socket
// (and the fallback's answer). A peer on another host, or of a uid we do
// not serve, gets ErrNotSameHost (its manager tries its next backend).
func (b *Backend) AcceptRoute(ctx context.Context, peerID uint64, p []byte) ([]byte, error) {
	return b.acceptRoute(ctx, peerID, p, false)
}

// acceptRoute is AcceptRoute; agent marks the route as this process's
// own host agent's (acceptAgentRoute).
func (b *Backend) acceptRoute(ctx context.Context, peerID uint64, p []byte, agent bool) ([]byte, error) {
	if err := b.ready(); err != nil {
		return nil, err
	}
	info, err := decodeInfo(p)
	if err != nil {
		return nil, err
	}
	if info.host != b.host {
		return nil, ErrNotSameHost
	}
	if !b.uidAllowed(info.uid) {
		return nil, uidRefused{uid: info.uid}
	}
	tok, err := b.newToken(peerID, &info, agent)
	if err != nil {
		return nil, err
	}
	a := routeAnswer{socket: b.name, token: tok}
	if fb := b.cfg.Fallback; fb != nil && info.fbKind == string(fb.Kind()) {
		if a.fb, err = fb.AcceptRoute(ctx, peerID, info.fb); err != nil {
			b.dropToken(tok)
			return nil, fmt.Errorf("shm: fallback %s: %w", fb.Kind(), err)
		}
	}
	return a.encode(), nil
}

// pendingRoute is the initiator's route between PrepareRoute and Complete.
type pendingRoute struct {
	b      *Backend
	peerID uint64
	fb     backend.PendingRoute // nil without a fallback
	ended  bool
}

// Abort releases the fallback's half-made route.
func (p *pendingRoute) Abort() {
	if !p.ended && p.fb != nil {
		p.fb.Abort()
	}
	p.ended = true
}

// Complete connects to the owner's socket, authenticates, maps the state
// table, and completes the fallback route. On error everything is undone.
func (p *pendingRoute) Complete(ctx context.Context, answer []byte) (backend.Route, error) {
	if p.ended {
		return nil, fmt.Errorf("shm: route completed twice: %w", rdmamgr.ErrProtocol)
	}
	a, err := decodeAnswer(answer)
	if err != nil {
		p.Abort()
		return nil, err
	}
	conn, tbl, err := p.b.connect(ctx, &a)
	if err != nil {
		p.Abort()
		return nil, err
	}
	var fb backend.Route
	if p.fb != nil {
		p.ended = true
		if len(a.fb) == 0 {
			p.fb.Abort()
		} else if fb, err = p.fb.Complete(ctx, a.fb); err != nil {
			p.fb.Abort()
			conn.Close()
			unix.Munmap(tbl.mem)
			return nil, fmt.Errorf("shm: fallback route: %w", err)
		}
	}
	p.ended = true
	r := newRoute(p.b, p.peerID, conn, tbl, fb)
	if err := p.b.addRoute(r); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// connect dials the owner's socket and runs the connection's handshake.
func (b *Backend) connect(ctx context.Context, a *routeAnswer) (*net.UnixConn, *table, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", "@"+a.socket)
	if err != nil {
		return nil, nil, fmt.Errorf("shm: dial @%s: %v: %w", a.socket, err, rdmamgr.ErrPeerGone)
	}
	conn := nc.(*net.UnixConn)
	dl := time.Now().Add(handshakeTimeout)
	if t, ok := ctx.Deadline(); ok && t.Before(dl) {
		dl = t
	}
	conn.SetDeadline(dl)
	tbl, err := b.handshake(conn, a)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, tbl, nil
}

func (b *Backend) handshake(conn *net.UnixConn, a *routeAnswer) (*table, error) {
	buf, oob := make([]byte, maxPacket), make([]byte, oobSize)
	p, err := readPacket(conn, buf, oob)
	if err != nil {
		return nil, fmt.Errorf("shm: hello: %w", err)
	}
	p.close()
	d := newDecoder(p.b)
	typ, ver := d.U8(), d.U8()
	nonce := d.Take(backend.NonceSize)
	if d.end() != nil || typ != msgHello || ver != protoVersion {
		return nil, fmt.Errorf("shm: hello type %d version %d: %w", typ, ver, rdmamgr.ErrProtocol)
	}
	mac := b.cfg.Secret.MAC(labelConn, a.token[:], nonce, u32(uint32(os.Getpid())))
	msg := append([]byte{msgAuth}, a.token[:]...)
	msg = append(append(msg, byte(len(mac))), mac...)
	if err := writePacket(conn, msg, -1); err != nil {
		return nil, fmt.Errorf("shm: credentials: %w", err)
	}
	if p, err = readPacket(conn, buf, oob); err != nil {
		return nil, fmt.Errorf("shm: welcome: %w", err)
	}
	defer p.close()
	d = newDecoder(p.b)
	typ, code, slots := d.U8(), d.U32(), d.U32()
	if err := d.end(); err != nil || typ != msgWelcome {
		return nil, fmt.Errorf("shm: welcome type %d: %w", typ, rdmamgr.ErrProtocol)
	}
	if code != uint32(rdmapb.Code_OK) {
		return nil, fmt.Errorf("shm: owner refused the connection (%s): %w", rdmapb.Code(code), codeErr(rdmapb.Code(code)))
	}
	if slots != tableSlots || p.fd < 0 {
		return nil, fmt.Errorf("shm: table of %d slots, fd %d: %w", slots, p.fd, rdmamgr.ErrProtocol)
	}
	if fl, err := unix.FcntlInt(uintptr(p.fd), unix.F_GETFL, 0); err != nil || fl&unix.O_ACCMODE != unix.O_RDWR {
		return nil, fmt.Errorf("shm: state table fd not read-write: %w", rdmamgr.ErrProtocol)
	}
	mem, _, err := mapShared(p.fd)
	if err != nil {
		return nil, err
	}
	if len(mem) != tableSlots*slotSize {
		unix.Munmap(mem)
		return nil, fmt.Errorf("shm: table of %d bytes: %w", len(mem), rdmamgr.ErrProtocol)
	}
	return &table{mem: mem}, nil
}

// codeErr is the sentinel of an owner's refusal code.
func codeErr(c rdmapb.Code) error {
	if err := backend.Sentinel(c); err != nil {
		return err
	}
	switch c {
	case rdmapb.Code_UNAUTHENTICATED:
		return rdmamgr.ErrUnauthenticated
	case rdmapb.Code_RESOURCE_EXHAUSTED:
		return rdmamgr.ErrLimit
	}
	return rdmamgr.ErrProtocol
}
