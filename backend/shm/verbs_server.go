//go:build linux

package shm

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// inboxRef holds the manager's inbox (an interface in an atomic pointer).
type inboxRef struct{ in backend.Inbox }

// SetInbox implements backend.InboxUser; the fallback gets the same
// inbox (the regions that go to it are the owner's too).
func (b *Backend) SetInbox(in backend.Inbox) {
	b.inbox.Store(&inboxRef{in: in})
	if u, ok := b.cfg.Fallback.(backend.InboxUser); ok {
		u.SetInbox(in)
	}
}

// Supports implements backend.Capabilities: every operation.
func (b *Backend) Supports(op backend.Op) bool {
	return op >= backend.OpWrite && op <= backend.OpFetchAdd
}

func (b *Backend) theInbox() backend.Inbox {
	if p := b.inbox.Load(); p != nil {
		return p.in
	}
	return nil
}

// inSend is a message arriving in fragments.
type inSend struct {
	req     uint64
	n, got  uint64
	imm     uint32
	hasImm  bool
	landing backend.Landing // nil when refused (the rest is drained)
	err     error
}

// event delivers a PutWithImm's event: the initiator copied the bytes into
// a region it mapped through this connection, and says so.
func (c *serverConn) event(m eventMsg) error {
	peer, err := c.originOf(m.origin)
	if err == nil {
		err = c.checkEvent(m)
	}
	if err == nil {
		if in := c.b.theInbox(); in == nil {
			err = fmt.Errorf("no inbox: %w", rdmamgr.ErrNoReceive)
		} else {
			err = in.Event(backend.Event{Peer: peer, Region: m.region, Offset: m.off, Length: m.n, Imm: m.imm})
		}
	}
	return writePacket(c.conn, ackMsg(m.req, uint32(backend.RemoteCode(err))), -1)
}

// checkEvent checks an event against what the connection exported: the
// region, mapped in that slot, alive, granting write and notify, the range
// inside it.
func (c *serverConn) checkEvent(m eventMsg) error {
	c.mu.Lock()
	e := c.exports[m.region]
	c.mu.Unlock()
	if e == nil || e.slot != m.slot {
		return rdmamgr.ErrReleased
	}
	r := e.ref.Region()
	if !r.Access().Allows(buffer.AccessWrite | buffer.AccessNotify) {
		return rdmamgr.ErrAccess
	}
	if err := buffer.CheckRange(uint64(r.Len()), m.off, m.n); err != nil || m.n == 0 {
		return rdmamgr.ErrOutOfRange
	}
	return c.b.reg.RemoteErr(r)
}

// sendStart takes the first packet of a message.
func (c *serverConn) sendStart(d *decoder) error {
	if c.send != nil {
		return fmt.Errorf("shm: a message started inside another: %w", rdmamgr.ErrProtocol)
	}
	s := &inSend{req: d.U64(), n: d.U64(), imm: d.U32()}
	flags := d.U8()
	s.hasImm = flags&sendHasImm != 0
	var origin uint64
	if flags&sendOrigin != 0 {
		if origin = d.U64(); origin == 0 && d.Err == nil {
			return fmt.Errorf("shm: message with origin 0: %w", rdmamgr.ErrProtocol)
		}
	}
	data := d.B
	if d.Err != nil || flags&^(sendHasImm|sendOrigin) != 0 || s.n == 0 || s.n > maxSend || uint64(len(data)) > s.n {
		return fmt.Errorf("shm: message header (%d bytes, flags %#x, %v): %w", s.n, flags, d.Err, rdmamgr.ErrProtocol)
	}
	peer, err := c.originOf(origin)
	if in := c.b.theInbox(); err != nil {
		s.err = err // the bytes are drained, the message refused
	} else if in == nil {
		s.err = fmt.Errorf("no inbox: %w", rdmamgr.ErrNoReceive)
	} else if s.landing, s.err = in.Recv(peer, s.n); s.err == nil && uint64(len(s.landing.Mem())) < s.n {
		s.landing.Done(0, 0, false, rdmamgr.ErrReceiveTooSmall)
		s.landing, s.err = nil, rdmamgr.ErrReceiveTooSmall
	}
	c.send = s
	return c.sendData(data)
}

// sendMore takes a later packet of the message in progress.
func (c *serverConn) sendMore(d *decoder) error {
	req := d.U64()
	if d.Err != nil || c.send == nil || req != c.send.req || uint64(len(d.B)) > c.send.n-c.send.got || len(d.B) == 0 {
		return fmt.Errorf("shm: message fragment out of place: %w", rdmamgr.ErrProtocol)
	}
	return c.sendData(d.B)
}

// sendAbort ends the message in progress undelivered: its sender's
// deadline passed or it was cancelled between two of its packets. The
// landing is given back; no answer (the sender has reported already).
func (c *serverConn) sendAbort(d *decoder) error {
	req := d.U64()
	if err := d.end(); err != nil {
		return err
	}
	if c.send == nil || req != c.send.req {
		return fmt.Errorf("shm: abort of a message not in progress: %w", rdmamgr.ErrProtocol)
	}
	s := c.send
	c.send = nil
	if s.landing != nil {
		s.landing.Done(0, 0, false, errSendAborted)
	}
	return nil
}

// sendData lands data and, once the message is whole, delivers it and
// answers.
func (c *serverConn) sendData(data []byte) error {
	s := c.send
	if s.landing != nil {
		copy(s.landing.Mem()[s.got:], data)
	}
	s.got += uint64(len(data))
	if s.got < s.n {
		return nil
	}
	c.send = nil
	if s.landing != nil {
		s.landing.Done(int(s.n), s.imm, s.hasImm, nil)
	}
	code := uint32(rdmapb.Code_OK)
	if s.err != nil {
		code = uint32(backend.RemoteCode(s.err))
	}
	return writePacket(c.conn, ackMsg(s.req, code), -1)
}

// originOf returns the Peer an event or a message is delivered as: the
// connection's peer, or origin (not 0) when the peer is this process's
// own host agent posting for another process; a non-agent claiming an
// origin is refused (ErrUnauthenticated), the connection kept.
func (c *serverConn) originOf(origin uint64) (uint64, error) {
	switch {
	case origin == 0:
		return c.peerID, nil
	case !c.agent:
		return 0, errForgedOrigin
	}
	return origin, nil
}

// abandonSend gives back the landing of a message the connection ended in.
func (c *serverConn) abandonSend() {
	if s := c.send; s != nil && s.landing != nil {
		s.landing.Done(0, 0, false, rdmamgr.ErrPeerGone)
	}
	c.send = nil
}
