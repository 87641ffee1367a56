//go:build linux

package shm

import (
	"encoding/binary"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// SetHandshakeTimeout sets the bound on a connection's authentication and
// returns a func that restores it.
func SetHandshakeTimeout(d time.Duration) func() {
	old := handshakeTimeout
	handshakeTimeout = d
	return func() { handshakeTimeout = old }
}

// SetTestHookSendPacket sets the hook run after each packet of a Send's
// message and returns a func that clears it.
func SetTestHookSendPacket(h func(wr *backend.WorkRequest)) func() {
	testHookSendPacket = h
	return func() { testHookSendPacket = nil }
}

// SetAbortBound sets the bound on a Send's abort and returns a func that
// restores it.
func SetAbortBound(d time.Duration) func() {
	old := abortBound
	abortBound = d
	return func() { abortBound = old }
}

// Wire exposes the socket protocol to the hostile tests.
const (
	MsgHello   = msgHello
	MsgAuth    = msgAuth
	MsgWelcome = msgWelcome
	MsgMap     = msgMap
	MsgMapped  = msgMapped
	MsgGone    = msgGone
	MsgCut     = msgCut
	MsgAbort   = msgSendAbort
	TokenSize  = tokenSize
)

// DecodeAnswer returns the socket name and token of an AcceptRoute answer.
func DecodeAnswer(p []byte) (socket string, token [TokenSize]byte, err error) {
	a, err := decodeAnswer(p)
	return a.socket, a.token, err
}

// EncodeInfo builds route info as PrepareRoute would, for a process pid
// of uid on this host (no fallback).
func EncodeInfo(pid, uid uint32) []byte {
	host, err := hostID("")
	if err != nil {
		panic(err)
	}
	i := routeInfo{host: host, pid: pid, uid: uid}
	return i.encode()
}

// EncodeMap builds a map request.
func EncodeMap(req, region uint64, key [16]byte, need byte) []byte {
	m := mapMsg{req: req, region: region, key: key, need: bufferAccess(need)}
	return m.encode()
}

// MACConn is the MAC an initiator proves the secret with.
const LabelConn = labelConn

func bufferAccess(b byte) buffer.Access { return buffer.Access(b) }

// Verbs messages for the hostile tests.
const (
	MsgEvent    = msgEvent
	MsgSend     = msgSend
	MsgSendMore = msgSendMore
	MsgAck      = msgAck
)

// EncodeEvent builds an event message.
func EncodeEvent(req uint64, slot uint32, region, off, n uint64, imm uint32) []byte {
	m := eventMsg{req: req, slot: slot, region: region, off: off, n: n, imm: imm}
	return m.encode()
}

// EncodeEventOrigin builds an event message carrying origin (8 bytes
// after the imm, even when 0).
func EncodeEventOrigin(req uint64, slot uint32, region, off, n uint64, imm uint32, origin uint64) []byte {
	return binary.LittleEndian.AppendUint64(EncodeEvent(req, slot, region, off, n, imm), origin)
}

// EncodeSendOrigin builds the first packet of a message of n bytes
// carrying origin (the flag set, even when 0) and data.
func EncodeSendOrigin(req, n, origin uint64, data []byte) []byte {
	b := sendHeader(nil, req, n, 0, false, 1)
	binary.LittleEndian.PutUint64(b[len(b)-8:], origin)
	return append(b, data...)
}

// EncodeSend builds the first packet of a message of n bytes carrying data.
func EncodeSend(req, n uint64, data []byte) []byte {
	return append(sendHeader(nil, req, n, 0, false, 0), data...)
}

// Socket caps (admit.go).
const (
	MaxPreAuthPerUID = maxPreAuthPerUID
	MaxRoutesPerPeer = maxRoutesPerPeer
)

// SetStuckBound sets how long a cut waits for a live peer's copies and
// returns a func that restores it.
func SetStuckBound(d time.Duration) func() {
	old := stuckBound
	stuckBound = d
	return func() { stuckBound = old }
}

// InFlight sums the copies the peers count in flight in the regions they
// mapped from b (their state tables).
func (b *Backend) InFlight() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n uint64
	for c := range b.conns {
		c.mu.Lock()
		for _, e := range c.exports {
			n += c.table.word(e.slot, wInFlight).Load()
		}
		c.mu.Unlock()
	}
	return n
}
