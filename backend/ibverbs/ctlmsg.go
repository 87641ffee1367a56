package ibverbs

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// The control messages a route's queue pairs SEND each other (see the
// package doc, "Two-sided messages"): the initiator's notice of a
// PutWithImm and its Send messages, and the owner's ack of either. Every
// message starts with a 16-byte header, big-endian:
//
//	off size field
//	  0    1 kind: ctlNotice, ctlSend or ctlAck
//	  1    1 flags: ctlHasImm (a Send with immediate data); else 0
//	  2    2 reserved (0)
//	  4    4 sequence number: the initiator's count of control messages
//	         on the route; an ack repeats the one it answers
//	  8    4 immediate value (notice, send) or wire code (ack, rdmapb.Code)
//	 12    4 reserved (0)
//
// A notice goes on with the range written and the handle's key:
//
//	16    8 region
//	24    8 offset
//	32    8 length
//	40   16 key
//
// A Send's message follows its header; an ack is the header alone. A
// decoder treats every field as hostile (rdmamgr.ErrProtocol).
const (
	ctlNotice = 1
	ctlSend   = 2
	ctlAck    = 3

	ctlHasImm = 1

	ctlHeader     = 16
	ctlNoticeSize = ctlHeader + 24 + buffer.KeySize
)

// ctlMsg is a decoded control message (payload not included).
type ctlMsg struct {
	kind   uint8
	hasImm bool
	seq    uint32
	imm    uint32 // or the ack's code
	region uint64
	offset uint64
	length uint64
	key    buffer.Key
}

// putHeader writes m's header into p (at least ctlHeader bytes).
func (m *ctlMsg) putHeader(p []byte) {
	clear(p[:ctlHeader])
	p[0] = m.kind
	if m.hasImm {
		p[1] = ctlHasImm
	}
	binary.BigEndian.PutUint32(p[4:], m.seq)
	binary.BigEndian.PutUint32(p[8:], m.imm)
}

// putNotice writes the notice m into p (at least ctlNoticeSize bytes).
func (m *ctlMsg) putNotice(p []byte) {
	m.putHeader(p)
	binary.BigEndian.PutUint64(p[16:], m.region)
	binary.BigEndian.PutUint64(p[24:], m.offset)
	binary.BigEndian.PutUint64(p[32:], m.length)
	copy(p[40:ctlNoticeSize], m.key[:])
}

// decodeCtl decodes the message in p (the bytes received). The payload of
// a Send is p[ctlHeader:].
func decodeCtl(p []byte) (ctlMsg, error) {
	var m ctlMsg
	if len(p) < ctlHeader {
		return m, fmt.Errorf("ibverbs: control message of %d bytes: %w", len(p), rdmamgr.ErrProtocol)
	}
	m.kind = p[0]
	m.hasImm = p[1] == ctlHasImm
	m.seq = binary.BigEndian.Uint32(p[4:])
	m.imm = binary.BigEndian.Uint32(p[8:])
	if p[2] != 0 || p[3] != 0 || binary.BigEndian.Uint32(p[12:]) != 0 {
		return m, fmt.Errorf("ibverbs: control message with reserved bytes set: %w", rdmamgr.ErrProtocol)
	}
	if p[1] != 0 && (m.kind != ctlSend || p[1] != ctlHasImm) {
		return m, fmt.Errorf("ibverbs: control message kind %d flags %#x: %w", m.kind, p[1], rdmamgr.ErrProtocol)
	}
	switch m.kind {
	case ctlSend:
		return m, nil
	case ctlAck:
		if len(p) != ctlHeader {
			return m, fmt.Errorf("ibverbs: ack of %d bytes: %w", len(p), rdmamgr.ErrProtocol)
		}
		if _, ok := rdmapb.Code_name[int32(m.imm)]; !ok {
			return m, fmt.Errorf("ibverbs: ack with code %d: %w", m.imm, rdmamgr.ErrProtocol)
		}
		return m, nil
	case ctlNotice:
		if len(p) != ctlNoticeSize {
			return m, fmt.Errorf("ibverbs: notice of %d bytes: %w", len(p), rdmamgr.ErrProtocol)
		}
		m.region = binary.BigEndian.Uint64(p[16:])
		m.offset = binary.BigEndian.Uint64(p[24:])
		m.length = binary.BigEndian.Uint64(p[32:])
		copy(m.key[:], p[40:ctlNoticeSize])
		if m.length == 0 || m.offset+m.length < m.offset {
			return m, fmt.Errorf("ibverbs: notice of [%d,+%d): %w", m.offset, m.length, rdmamgr.ErrProtocol)
		}
		return m, nil
	}
	return m, fmt.Errorf("ibverbs: control message kind %d: %w", m.kind, rdmamgr.ErrProtocol)
}

// ackErr is the error of an operation whose ack carries code (nil for OK).
func ackErr(op backend.Op, code uint32) error {
	c := rdmapb.Code(code)
	if c == rdmapb.Code_OK {
		return nil
	}
	return fmt.Errorf("ibverbs: %w", &backend.RemoteError{Code: c, Op: op})
}
