//go:build linux

package shm

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// handshakeTimeout bounds a connection's authentication (a variable for
// tests).
var handshakeTimeout = 5 * time.Second

const labelConn = "rdmamgr shm connection v1"

func (b *Backend) acceptLoop(ln *net.UnixListener) {
	defer b.wg.Done()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if ok, dropped := b.logs.accept.Allow(); ok {
				b.log.Warn("accept", "err", err, "suppressed", dropped)
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		uid, ok := b.admit(c)
		if !ok {
			c.Close()
			continue
		}
		sc := &serverConn{b: b, conn: c, uid: uid, exports: make(map[uint64]*export), dead: make(chan struct{})}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			c.Close()
			b.preAuthDone(uid)
			continue
		}
		b.conns[sc] = struct{}{}
		b.wg.Add(1)
		b.mu.Unlock()
		go sc.serve()
	}
}

// serve authenticates the connection, hands over its state table and
// answers its requests until it ends.
func (c *serverConn) serve() {
	defer c.b.wg.Done()
	defer c.teardown()
	err := c.authenticate()
	c.b.preAuthDone(c.uid)
	if err != nil {
		c.b.authFail.Add(1)
		if ok, dropped := c.b.logs.refused.Allow(); ok {
			c.b.log.Warn("shm connection refused", "err", err, "suppressed", dropped)
		}
		return
	}
	buf, oob := make([]byte, maxPacket+fragMax), make([]byte, oobSize)
	defer c.abandonSend()
	for {
		p, err := readPacket(c.conn, buf, oob)
		if err != nil {
			if ok, dropped := c.b.logs.ended.Allow(); ok && !errors.Is(err, net.ErrClosed) && !isEOF(err) {
				c.b.log.Warn("shm connection ended", "peer", fmt.Sprintf("%016x", c.peerID), "err", err, "suppressed", dropped)
			}
			return
		}
		p.close() // the initiator passes no fds
		if err := c.handle(p.b); err != nil {
			if ok, dropped := c.b.logs.ended.Allow(); ok {
				c.b.log.Warn("shm connection refused a message", "peer", fmt.Sprintf("%016x", c.peerID), "err", err, "suppressed", dropped)
			}
			return
		}
	}
}

// isEOF reports whether err is the peer closing its end: routine.
func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE)
}

// authenticate runs the connection's handshake: our nonce; the
// initiator's token and MAC; its credentials (SO_PEERCRED) against what
// the route's handshake claimed; then the state table.
func (c *serverConn) authenticate() error {
	c.conn.SetDeadline(time.Now().Add(handshakeTimeout))
	nonce := make([]byte, backend.NonceSize)
	_, _ = rand.Read(nonce)
	if err := writePacket(c.conn, append([]byte{msgHello, protoVersion}, nonce...), -1); err != nil {
		return err
	}
	buf, oob := make([]byte, maxPacket), make([]byte, oobSize)
	p, err := readPacket(c.conn, buf, oob)
	if err != nil {
		return fmt.Errorf("no credentials: %w", err)
	}
	p.close()
	d := newDecoder(p.b)
	typ := d.U8()
	var tok [tokenSize]byte
	copy(tok[:], d.Take(tokenSize))
	mac := d.Take(int(d.U8()))
	if err := d.end(); err != nil || typ != msgAuth {
		return c.refuse(fmt.Errorf("malformed credentials (type %d): %w", typ, rdmamgr.ErrUnauthenticated))
	}
	t, ok := c.b.peekToken(tok)
	if !ok {
		return c.refuse(fmt.Errorf("unknown or expired route token: %w", rdmamgr.ErrUnauthenticated))
	}
	pid, uid, err := peerCred(c.conn)
	switch {
	case err != nil:
		return c.refuse(fmt.Errorf("no peer credentials: %v: %w", err, rdmamgr.ErrUnauthenticated))
	case !c.b.uidAllowed(uid) || uid != t.uid:
		return c.refuse(fmt.Errorf("peer uid %d (route claimed %d) not allowed: %w", uid, t.uid, rdmamgr.ErrUnauthenticated))
	case pid <= 0 || uint32(pid) != t.pid:
		return c.refuse(fmt.Errorf("peer pid %d, route claimed %d: %w", pid, t.pid, rdmamgr.ErrUnauthenticated))
	case !c.b.cfg.Secret.Verify(mac, labelConn, tok[:], nonce, u32(t.pid)):
		return c.refuse(fmt.Errorf("connection MAC does not verify: %w", rdmamgr.ErrUnauthenticated))
	}
	// Proved: only now is the token used up (a failed attempt leaves it to
	// the process it was issued for).
	if t, err = c.b.takeToken(tok); err != nil {
		return c.refuse(err)
	}
	c.authed, c.authedAs = true, t.peerID
	fd, tbl, err := newTable()
	if err != nil {
		return c.refuse(err)
	}
	c.mu.Lock()
	c.tableFD, c.table, c.peerID, c.free = fd, tbl, t.peerID, make([]uint32, 0, 64)
	c.agent = t.agent
	c.mu.Unlock()
	if err := writePacket(c.conn, welcome(rdmapb.Code_OK), fd); err != nil {
		return err
	}
	c.conn.SetDeadline(time.Time{})
	return nil
}

func welcome(code rdmapb.Code) []byte {
	b := []byte{msgWelcome}
	b = append(b, u32(uint32(code))...)
	return append(b, u32(tableSlots)...)
}

// refuse tells the initiator why (best effort) and returns err.
func (c *serverConn) refuse(err error) error {
	_ = writePacket(c.conn, welcome(backend.Code(err)), -1)
	return err
}

// handle answers one request.
func (c *serverConn) handle(p []byte) error {
	d := newDecoder(p)
	switch typ := d.U8(); typ {
	case msgMap:
		m := decodeMap(&d)
		if err := d.end(); err != nil {
			return err
		}
		rep, fd, dev := c.mapRegion(m)
		pkt := rep.encode()
		if dev != nil {
			pkt = dev.encode()
		}
		err := writePacket(c.conn, pkt, fd)
		if fd >= 0 {
			unix.Close(fd)
		}
		return err
	case msgUnmap:
		slot, id := d.U32(), d.U64()
		if err := d.end(); err != nil {
			return err
		}
		c.unmap(slot, id)
		return nil
	case msgEvent:
		m := decodeEvent(&d)
		if err := d.end(); err != nil {
			return err
		}
		return c.event(m)
	case msgSend:
		return c.sendStart(&d)
	case msgSendMore:
		return c.sendMore(&d)
	case msgSendAbort:
		return c.sendAbort(&d)
	default:
		return fmt.Errorf("shm: message type %d: %w", typ, rdmamgr.ErrProtocol)
	}
}

// teardown ends the connection: every region it mapped is cut, its copies
// drained (within drainBound: a peer gone dead never lowers its counts),
// the references released, the table unmapped.
func (c *serverConn) teardown() {
	c.conn.Close()
	c.mu.Lock()
	close(c.dead)
	c.deadAt = time.Now()
	for id, e := range c.exports {
		delete(c.exports, id)
		c.cutExport(e, stReleased)
	}
	c.mu.Unlock()
	c.drains.Wait()
	s := c.served()
	c.mu.Lock()
	if c.table != nil {
		unix.Munmap(c.table.mem)
		unix.Close(c.tableFD)
		c.table = nil
	}
	c.mu.Unlock()
	b := c.b
	if c.authed {
		b.authedDone(c.authedAs)
	}
	b.mu.Lock()
	delete(b.conns, c)
	b.gone.Ops += s.Ops
	b.gone.BytesIn += s.BytesIn
	b.gone.BytesOut += s.BytesOut
	b.gone.Rejected += s.Rejected
	b.mu.Unlock()
}

// serverConn is the owner's side of one route.
type serverConn struct {
	b      *Backend
	conn   *net.UnixConn
	dead   chan struct{} // closed at teardown
	drains sync.WaitGroup
	uid    uint32 // SO_PEERCRED at accept
	// authed: took an authenticated slot, for peer authedAs (the serving
	// goroutine's only).
	authed   bool
	authedAs uint64
	// agent: the peer is this process's own host agent (its token was
	// issued by acceptAgentRoute): an origin on its events and messages is
	// honoured, and it gets cut notices (msgCut). Set under mu with the
	// table, read-only after.
	agent bool

	mu sync.Mutex // guards the fields below
	// peerID is the initiating manager (0 until authenticated).
	peerID   uint64
	table    *table
	tableFD  int
	exports  map[uint64]*export // by region id
	free     []uint32           // slots given back
	next     uint32             // slots 1..next-1 were handed out once
	rejected uint64             // map requests refused
	deadAt   time.Time

	// send is the message arriving, if any (the serving goroutine's only).
	send *inSend
}
