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
// package doc, "Two-sided messages" and "Host agents"): the initiator's
// notice of a PutWithImm, its Send messages and its resolve requests, and
// the owner's ack of a notice or Send and its answer to a resolve. Every
// message starts with a 16-byte header, big-endian:
//
//	off size field
//	  0    1 kind: ctlNotice, ctlSend, ctlAck, ctlResolve, ctlResolved,
//	         ctlInvalidate, ctlInvalAck or ctlGoodbye
//	  1    1 flags: ctlHasImm (a Send with immediate data), ctlVia (a
//	         notice or Send for a process attached to the owner, a host
//	         agent); else 0
//	  2    2 reserved (0)
//	  4    4 sequence number: the initiator's count of control messages
//	         on the route; an ack or answer repeats the one it answers
//	  8    4 immediate value (notice, send) or wire code (ack, answer,
//	         rdmapb.Code); 0 in a resolve
//	 12    4 reserved (0)
//
// A notice goes on with the range written and the handle's key (with
// ctlVia: the region and key of the owner's proxy, from a resolve answer,
// and the origin):
//
//	16    8 region
//	24    8 offset
//	32    8 length
//	40   16 key
//	56    8 origin (ctlVia only; 0: the route's peer)
//
// A Send's message follows its header; with ctlVia a 16-byte extension
// comes first: via (2 bytes, not 0), 6 reserved (0), origin (8).
// An ack is the header alone.
//
// A resolve asks a host agent for the proxy of an attached process's
// region (agentapi.Resolver.Resolve), 48 bytes:
//
//	16    8 region (the process's)
//	24   16 key (the process's)
//	40    2 via (not 0)
//	42    2 reserved (0)
//	44    4 access needed (buffer.Access, valid, not 0)
//
// Its answer is the header alone with a code other than OK, or, with OK,
// 64 bytes:
//
//	16    8 address of the proxy's remote memory region
//	24    4 its rkey
//	28    4 its access (buffer.Access, valid)
//	32    8 its length (not 0; address + length does not overflow)
//	40    8 the proxy's region id in the owner's registry (not 0)
//	48   16 the proxy's key
//
// An invalidate (owner to initiator, ctlInvalidate) tells an initiator
// that resolved a proxy that the proxy is about to go (its remote memory
// region is deregistered once the initiator acks, or at the owner's
// give-up); the initiator's invalidate ack (ctlInvalAck) answers it once
// its operations on the proxy's rkey have completed. Both are 24 bytes:
//
//	16    8 the proxy's region id in the owner's registry (not 0)
//
// with the owner's own count of invalidates as the sequence number (the
// ack repeats it) and, in an invalidate, why as a wire code (REVOKED or
// RELEASED; 0 in an ack). A goodbye (ctlGoodbye, owner to initiator) is
// the header alone: the owner's backend is closing, the route ends.
//
// A decoder treats every field as hostile (rdmamgr.ErrProtocol).
const (
	ctlNotice     = 1
	ctlSend       = 2
	ctlAck        = 3
	ctlResolve    = 4
	ctlResolved   = 5
	ctlInvalidate = 6
	ctlInvalAck   = 7
	ctlGoodbye    = 8

	ctlHasImm = 1
	ctlVia    = 2

	ctlHeader        = 16
	ctlNoticeSize    = ctlHeader + 24 + buffer.KeySize
	ctlNoticeViaSize = ctlNoticeSize + 8
	ctlSendViaHeader = ctlHeader + 16
	ctlResolveSize   = ctlHeader + 32
	ctlResolvedSize  = ctlHeader + 48
	ctlInvalSize     = ctlHeader + 8
)

// ctlMsg is a decoded control message (payload not included).
type ctlMsg struct {
	kind   uint8
	hasImm bool
	via    bool // ctlVia (notice, send)
	seq    uint32
	imm    uint32 // or the ack's code
	region uint64 // notice; resolve (the process's); answer (the proxy's)
	offset uint64
	length uint64 // notice; answer (the proxy's)
	key    buffer.Key
	origin uint64 // notice, send with via
	slot   uint16 // send with via, resolve: the process's slot (via)
	access buffer.Access
	addr   uint64 // answer
	rkey   uint32 // answer
	hdrLen int    // a Send's: where its message starts
}

// putHeader writes m's header into p (at least ctlHeader bytes).
func (m *ctlMsg) putHeader(p []byte) {
	clear(p[:ctlHeader])
	p[0] = m.kind
	if m.hasImm {
		p[1] |= ctlHasImm
	}
	if m.via {
		p[1] |= ctlVia
	}
	binary.BigEndian.PutUint32(p[4:], m.seq)
	binary.BigEndian.PutUint32(p[8:], m.imm)
}

// put writes m into p (large enough) and returns its length: a Send's
// header (and via extension) without its message.
func (m *ctlMsg) put(p []byte) int {
	m.putHeader(p)
	switch m.kind {
	case ctlNotice:
		m.putNotice(p)
		if m.via {
			return ctlNoticeViaSize
		}
		return ctlNoticeSize
	case ctlSend:
		if !m.via {
			return ctlHeader
		}
		clear(p[ctlHeader:ctlSendViaHeader])
		binary.BigEndian.PutUint16(p[16:], m.slot)
		binary.BigEndian.PutUint64(p[24:], m.origin)
		return ctlSendViaHeader
	case ctlResolve:
		binary.BigEndian.PutUint64(p[16:], m.region)
		copy(p[24:40], m.key[:])
		binary.BigEndian.PutUint16(p[40:], m.slot)
		clear(p[42:44])
		binary.BigEndian.PutUint32(p[44:], uint32(m.access))
		return ctlResolveSize
	case ctlInvalidate, ctlInvalAck:
		binary.BigEndian.PutUint64(p[16:], m.region)
		return ctlInvalSize
	case ctlResolved:
		if rdmapb.Code(m.imm) != rdmapb.Code_OK {
			return ctlHeader
		}
		binary.BigEndian.PutUint64(p[16:], m.addr)
		binary.BigEndian.PutUint32(p[24:], m.rkey)
		binary.BigEndian.PutUint32(p[28:], uint32(m.access))
		binary.BigEndian.PutUint64(p[32:], m.length)
		binary.BigEndian.PutUint64(p[40:], m.region)
		copy(p[48:64], m.key[:])
		return ctlResolvedSize
	}
	return ctlHeader
}

// putNotice writes the notice m into p (at least ctlNoticeSize bytes, or
// ctlNoticeViaSize with via).
func (m *ctlMsg) putNotice(p []byte) {
	m.putHeader(p)
	binary.BigEndian.PutUint64(p[16:], m.region)
	binary.BigEndian.PutUint64(p[24:], m.offset)
	binary.BigEndian.PutUint64(p[32:], m.length)
	copy(p[40:ctlNoticeSize], m.key[:])
	if m.via {
		binary.BigEndian.PutUint64(p[ctlNoticeSize:], m.origin)
	}
}

// decodeCtl decodes the message in p (the bytes received). The payload of
// a Send is p[m.hdrLen:].
func decodeCtl(p []byte) (ctlMsg, error) {
	var m ctlMsg
	if len(p) < ctlHeader {
		return m, fmt.Errorf("ibverbs: control message of %d bytes: %w", len(p), rdmamgr.ErrProtocol)
	}
	m.kind = p[0]
	m.hasImm = p[1]&ctlHasImm != 0
	m.via = p[1]&ctlVia != 0
	m.seq = binary.BigEndian.Uint32(p[4:])
	m.imm = binary.BigEndian.Uint32(p[8:])
	m.hdrLen = ctlHeader
	if p[2] != 0 || p[3] != 0 || binary.BigEndian.Uint32(p[12:]) != 0 {
		return m, fmt.Errorf("ibverbs: control message with reserved bytes set: %w", rdmamgr.ErrProtocol)
	}
	allowed := byte(0)
	switch m.kind {
	case ctlSend:
		allowed = ctlHasImm | ctlVia
	case ctlNotice:
		allowed = ctlVia
	}
	if p[1]&^allowed != 0 {
		return m, fmt.Errorf("ibverbs: control message kind %d flags %#x: %w", m.kind, p[1], rdmamgr.ErrProtocol)
	}
	switch m.kind {
	case ctlSend:
		return m, m.decodeSendVia(p)
	case ctlAck:
		if len(p) != ctlHeader {
			return m, fmt.Errorf("ibverbs: ack of %d bytes: %w", len(p), rdmamgr.ErrProtocol)
		}
		return m, checkCode(m.imm)
	case ctlNotice:
		size := ctlNoticeSize
		if m.via {
			size = ctlNoticeViaSize
		}
		if len(p) != size {
			return m, fmt.Errorf("ibverbs: notice of %d bytes: %w", len(p), rdmamgr.ErrProtocol)
		}
		m.region = binary.BigEndian.Uint64(p[16:])
		m.offset = binary.BigEndian.Uint64(p[24:])
		m.length = binary.BigEndian.Uint64(p[32:])
		copy(m.key[:], p[40:ctlNoticeSize])
		if m.via {
			m.origin = binary.BigEndian.Uint64(p[ctlNoticeSize:])
		}
		if m.length == 0 || m.offset+m.length < m.offset {
			return m, fmt.Errorf("ibverbs: notice of [%d,+%d): %w", m.offset, m.length, rdmamgr.ErrProtocol)
		}
		return m, nil
	case ctlResolve:
		return m, m.decodeResolve(p)
	case ctlResolved:
		return m, m.decodeResolved(p)
	case ctlInvalidate, ctlInvalAck:
		return m, m.decodeInval(p)
	case ctlGoodbye:
		if len(p) != ctlHeader || m.imm != 0 {
			return m, fmt.Errorf("ibverbs: goodbye of %d bytes, code %d: %w", len(p), m.imm, rdmamgr.ErrProtocol)
		}
		return m, nil
	}
	return m, fmt.Errorf("ibverbs: control message kind %d: %w", m.kind, rdmamgr.ErrProtocol)
}

// checkCode checks an ack's or answer's wire code.
func checkCode(code uint32) error {
	if _, ok := rdmapb.Code_name[int32(code)]; !ok {
		return fmt.Errorf("ibverbs: ack with code %d: %w", code, rdmamgr.ErrProtocol)
	}
	return nil
}

// decodeSendVia decodes a Send's via extension, if it has one.
func (m *ctlMsg) decodeSendVia(p []byte) error {
	if !m.via {
		return nil
	}
	if len(p) < ctlSendViaHeader {
		return fmt.Errorf("ibverbs: send of %d bytes with a via: %w", len(p), rdmamgr.ErrProtocol)
	}
	m.slot = binary.BigEndian.Uint16(p[16:])
	m.origin = binary.BigEndian.Uint64(p[24:])
	m.hdrLen = ctlSendViaHeader
	for _, c := range p[18:24] {
		if c != 0 {
			return fmt.Errorf("ibverbs: send with reserved bytes set: %w", rdmamgr.ErrProtocol)
		}
	}
	if m.slot == 0 {
		return fmt.Errorf("ibverbs: send with via 0: %w", rdmamgr.ErrProtocol)
	}
	return nil
}

func (m *ctlMsg) decodeResolve(p []byte) error {
	if len(p) != ctlResolveSize {
		return fmt.Errorf("ibverbs: resolve of %d bytes: %w", len(p), rdmamgr.ErrProtocol)
	}
	m.region = binary.BigEndian.Uint64(p[16:])
	copy(m.key[:], p[24:40])
	m.slot = binary.BigEndian.Uint16(p[40:])
	m.access = buffer.Access(binary.BigEndian.Uint32(p[44:]))
	switch {
	case m.imm != 0 || p[42] != 0 || p[43] != 0:
		return fmt.Errorf("ibverbs: resolve with reserved bytes set: %w", rdmamgr.ErrProtocol)
	case m.slot == 0:
		return fmt.Errorf("ibverbs: resolve for via 0: %w", rdmamgr.ErrProtocol)
	case m.access == 0 || !m.access.Valid():
		return fmt.Errorf("ibverbs: resolve for access %#x: %w", uint32(m.access), rdmamgr.ErrProtocol)
	}
	return nil
}

func (m *ctlMsg) decodeResolved(p []byte) error {
	if err := checkCode(m.imm); err != nil {
		return err
	}
	if rdmapb.Code(m.imm) != rdmapb.Code_OK {
		if len(p) != ctlHeader {
			return fmt.Errorf("ibverbs: refusal of a resolve of %d bytes: %w", len(p), rdmamgr.ErrProtocol)
		}
		return nil
	}
	if len(p) != ctlResolvedSize {
		return fmt.Errorf("ibverbs: resolve answer of %d bytes: %w", len(p), rdmamgr.ErrProtocol)
	}
	m.addr = binary.BigEndian.Uint64(p[16:])
	m.rkey = binary.BigEndian.Uint32(p[24:])
	m.access = buffer.Access(binary.BigEndian.Uint32(p[28:]))
	m.length = binary.BigEndian.Uint64(p[32:])
	m.region = binary.BigEndian.Uint64(p[40:])
	copy(m.key[:], p[48:64])
	switch {
	case !m.access.Valid():
		return fmt.Errorf("ibverbs: resolve answer with access %#x: %w", uint32(m.access), rdmamgr.ErrProtocol)
	case m.length == 0 || m.addr+m.length < m.addr:
		return fmt.Errorf("ibverbs: resolve answer of [%#x,+%d): %w", m.addr, m.length, rdmamgr.ErrProtocol)
	case m.region == 0:
		return fmt.Errorf("ibverbs: resolve answer naming region 0: %w", rdmamgr.ErrProtocol)
	}
	return nil
}

// decodeInval decodes an invalidate or its ack.
func (m *ctlMsg) decodeInval(p []byte) error {
	if len(p) != ctlInvalSize {
		return fmt.Errorf("ibverbs: invalidate (kind %d) of %d bytes: %w", m.kind, len(p), rdmamgr.ErrProtocol)
	}
	m.region = binary.BigEndian.Uint64(p[16:])
	switch {
	case m.region == 0:
		return fmt.Errorf("ibverbs: invalidate (kind %d) naming region 0: %w", m.kind, rdmamgr.ErrProtocol)
	case m.kind == ctlInvalAck && m.imm != 0:
		return fmt.Errorf("ibverbs: invalidate ack with code %d: %w", m.imm, rdmamgr.ErrProtocol)
	case m.kind == ctlInvalidate && rdmapb.Code(m.imm) != rdmapb.Code_REVOKED && rdmapb.Code(m.imm) != rdmapb.Code_RELEASED:
		return fmt.Errorf("ibverbs: invalidate with code %d: %w", m.imm, rdmamgr.ErrProtocol)
	}
	return nil
}

// ackErr is the error of an operation whose ack carries code (nil for OK).
func ackErr(op backend.Op, code uint32) error {
	c := rdmapb.Code(code)
	if c == rdmapb.Code_OK {
		return nil
	}
	return fmt.Errorf("ibverbs: %w", &backend.RemoteError{Code: c, Op: op})
}
