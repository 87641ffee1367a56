//go:build linux

package shm

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/lewire"
)

// protoVersion is the version of the route info and of the socket's
// messages.
const protoVersion = 1

// Socket messages (one SOCK_SEQPACKET packet each; little endian).
const (
	msgHello    = 1  // owner → initiator: version, nonce
	msgAuth     = 2  // initiator → owner: token, MAC
	msgWelcome  = 3  // owner → initiator: code, slots; the state table's fd
	msgMap      = 4  // initiator → owner: req, region, key, need
	msgMapped   = 5  // owner → initiator: req, code, slot, offset, length, access; the memfd
	msgUnmap    = 6  // initiator → owner: slot, region (no longer mapped)
	msgGone     = 7  // owner → initiator: slot, region (cut and drained: unmap it)
	msgEvent    = 8  // initiator → owner: req, slot, region, offset, length, imm[, origin] (after the bytes)
	msgSend     = 9  // initiator → owner: req, length, imm, flags[, origin]; the message's first bytes
	msgSendMore = 10 // initiator → owner: req; the message's next bytes
	msgAck      = 11 // owner → initiator: req, code (of an event or a message)
	msgCut      = 12 // owner → its agent only: slot, region (cut: its users are being drained)
	// msgSendAbort: initiator → owner: req; the message in progress ends
	// undelivered (its sender's deadline passed or it was cancelled
	// between two packets), with no answer. An owner that predates it
	// ends the connection on it, as the sender did itself before.
	msgSendAbort = 13
)

// fragMax is how many bytes of a message one packet carries; maxSend
// bounds a message.
const (
	fragMax = 60 << 10
	maxSend = 64 << 20
)

// maxPacket bounds a socket message; maxFallbackInfo the fallback's
// endpoint info carried inside ours.
const (
	maxPacket       = 256
	maxFallbackInfo = 64 << 10
	tokenSize       = 16
	hostIDSize      = 32
)

// routeInfo is the initiator's endpoint info (PrepareRoute).
type routeInfo struct {
	host     [hostIDSize]byte
	pid, uid uint32
	fbKind   string // the initiator's fallback backend, "" without one
	fb       []byte // its endpoint info
}

// routeAnswer is the owner's (AcceptRoute).
type routeAnswer struct {
	socket string // abstract socket name, without the leading '@'
	token  [tokenSize]byte
	fb     []byte // the fallback's answer; empty without one
}

func (i *routeInfo) encode() []byte {
	b := []byte{protoVersion}
	b = append(b, i.host[:]...)
	b = binary.LittleEndian.AppendUint32(b, i.pid)
	b = binary.LittleEndian.AppendUint32(b, i.uid)
	b = append(b, byte(len(i.fbKind)))
	b = append(b, i.fbKind...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(i.fb)))
	return append(b, i.fb...)
}

// decoder reads fields and remembers the first error (lewire's reads:
// a read past the end fails with "shm: truncated message", ErrProtocol).
type decoder struct{ lewire.Decoder }

func newDecoder(p []byte) decoder { return decoder{lewire.Decoder{B: p, Prefix: "shm"}} }

// end fails unless every byte was read.
func (d *decoder) end() error {
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("shm: %d trailing bytes: %w", len(d.B), rdmamgr.ErrProtocol)
	}
	return d.Err
}

// version checks the leading version byte.
func (d *decoder) version() error {
	if v := d.U8(); d.Err == nil && v != protoVersion {
		d.Err = fmt.Errorf("shm: version %d, ours %d: %w", v, protoVersion, rdmamgr.ErrVersion)
	}
	return d.Err
}

func decodeInfo(p []byte) (routeInfo, error) {
	var i routeInfo
	d := newDecoder(p)
	if err := d.version(); err != nil {
		return i, err
	}
	copy(i.host[:], d.Take(hostIDSize))
	i.pid, i.uid = d.U32(), d.U32()
	i.fbKind = string(d.Take(int(d.U8())))
	n := d.U32()
	if d.Err == nil && n > maxFallbackInfo {
		return i, fmt.Errorf("shm: fallback info of %d bytes: %w", n, rdmamgr.ErrProtocol)
	}
	i.fb = d.Take(int(n))
	return i, d.end()
}

func (a *routeAnswer) encode() []byte {
	b := []byte{protoVersion, byte(len(a.socket))}
	b = append(b, a.socket...)
	b = append(b, a.token[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(a.fb)))
	return append(b, a.fb...)
}

func decodeAnswer(p []byte) (routeAnswer, error) {
	var a routeAnswer
	d := newDecoder(p)
	if err := d.version(); err != nil {
		return a, err
	}
	a.socket = string(d.Take(int(d.U8())))
	copy(a.token[:], d.Take(tokenSize))
	n := d.U32()
	if d.Err == nil && n > maxFallbackInfo {
		return a, fmt.Errorf("shm: fallback answer of %d bytes: %w", n, rdmamgr.ErrProtocol)
	}
	a.fb = d.Take(int(n))
	if d.Err == nil && a.socket == "" {
		d.Err = fmt.Errorf("shm: answer without a socket: %w", rdmamgr.ErrProtocol)
	}
	return a, d.end()
}

// mapMsg asks the owner for a region (msgMap).
type mapMsg struct {
	req, region uint64
	key         buffer.Key
	need        buffer.Access
}

func (m *mapMsg) encode() []byte {
	b := []byte{msgMap}
	b = binary.LittleEndian.AppendUint64(b, m.req)
	b = binary.LittleEndian.AppendUint64(b, m.region)
	b = append(b, m.key[:]...)
	return append(b, byte(m.need))
}

func decodeMap(d *decoder) mapMsg {
	var m mapMsg
	m.req, m.region = d.U64(), d.U64()
	copy(m.key[:], d.Take(buffer.KeySize))
	m.need = buffer.Access(d.U8())
	return m
}

// mappedMsg answers a mapMsg (msgMapped); the memfd travels with it when
// code is OK.
type mappedMsg struct {
	req      uint64
	code     uint32
	slot     uint32
	off, len uint64
	access   buffer.Access
}

func (m *mappedMsg) encode() []byte {
	b := []byte{msgMapped}
	b = binary.LittleEndian.AppendUint64(b, m.req)
	b = binary.LittleEndian.AppendUint32(b, m.code)
	b = binary.LittleEndian.AppendUint32(b, m.slot)
	b = binary.LittleEndian.AppendUint64(b, m.off)
	b = binary.LittleEndian.AppendUint64(b, m.len)
	return append(b, byte(m.access))
}

func decodeMapped(d *decoder) mappedMsg {
	var m mappedMsg
	m.req, m.code, m.slot = d.U64(), d.U32(), d.U32()
	m.off, m.len = d.U64(), d.U64()
	m.access = buffer.Access(d.U8())
	return m
}

// slotMsg is msgUnmap and msgGone: a slot and the region it held.
func slotMsg(typ byte, slot uint32, region uint64) []byte {
	b := []byte{typ}
	b = binary.LittleEndian.AppendUint32(b, slot)
	return binary.LittleEndian.AppendUint64(b, region)
}

// eventMsg is msgEvent.
type eventMsg struct {
	req         uint64
	slot        uint32
	region, off uint64
	n           uint64
	imm         uint32
	// origin, when not 0, is the manager a host agent posts for (8 more
	// bytes); honoured only from the owner's own agent.
	origin uint64
}

func (m *eventMsg) encode() []byte {
	b := []byte{msgEvent}
	b = binary.LittleEndian.AppendUint64(b, m.req)
	b = binary.LittleEndian.AppendUint32(b, m.slot)
	b = binary.LittleEndian.AppendUint64(b, m.region)
	b = binary.LittleEndian.AppendUint64(b, m.off)
	b = binary.LittleEndian.AppendUint64(b, m.n)
	b = binary.LittleEndian.AppendUint32(b, m.imm)
	if m.origin != 0 {
		b = binary.LittleEndian.AppendUint64(b, m.origin)
	}
	return b
}

func decodeEvent(d *decoder) eventMsg {
	var m eventMsg
	m.req, m.slot = d.U64(), d.U32()
	m.region, m.off, m.n = d.U64(), d.U64(), d.U64()
	m.imm = d.U32()
	if len(d.B) == 8 {
		if m.origin = d.U64(); m.origin == 0 {
			d.Err = fmt.Errorf("shm: event with origin 0: %w", rdmamgr.ErrProtocol)
		}
	}
	return m
}

// Flags of a msgSend.
const (
	sendHasImm = 1
	sendOrigin = 2 // 8 bytes of origin manager id follow the flags
)

// sendHeader starts a msgSend packet: the message's first bytes follow.
// origin, when not 0, is the manager a host agent posts for.
func sendHeader(b []byte, req, n uint64, imm uint32, hasImm bool, origin uint64) []byte {
	b = append(b[:0], msgSend)
	b = binary.LittleEndian.AppendUint64(b, req)
	b = binary.LittleEndian.AppendUint64(b, n)
	b = binary.LittleEndian.AppendUint32(b, imm)
	h := byte(0)
	if hasImm {
		h = sendHasImm
	}
	if origin != 0 {
		b = append(b, h|sendOrigin)
		return binary.LittleEndian.AppendUint64(b, origin)
	}
	return append(b, h)
}

// sendAbortMsg is a msgSendAbort packet for the message req.
func sendAbortMsg(req uint64) []byte {
	b := make([]byte, 9)
	b[0] = msgSendAbort
	binary.LittleEndian.PutUint64(b[1:], req)
	return b
}

// sendMoreHeader starts a msgSendMore packet.
func sendMoreHeader(b []byte, req uint64) []byte {
	b = append(b[:0], msgSendMore)
	return binary.LittleEndian.AppendUint64(b, req)
}

func ackMsg(req uint64, code uint32) []byte {
	b := []byte{msgAck}
	b = binary.LittleEndian.AppendUint64(b, req)
	return binary.LittleEndian.AppendUint32(b, code)
}
