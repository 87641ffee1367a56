//go:build linux

package shm

import (
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// SetHandshakeTimeout sets the bound on a connection's authentication and
// returns a func that restores it.
func SetHandshakeTimeout(d time.Duration) func() {
	old := handshakeTimeout
	handshakeTimeout = d
	return func() { handshakeTimeout = old }
}

// Wire exposes the socket protocol to the hostile tests.
const (
	MsgHello   = msgHello
	MsgAuth    = msgAuth
	MsgWelcome = msgWelcome
	MsgMap     = msgMap
	MsgMapped  = msgMapped
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
	host, err := hostID()
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
