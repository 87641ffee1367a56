package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// The wire forms of route setup: the route info the managers' actors carry
// (initiator -> responder -> initiator), and the hello that opens every
// data connection (challenge, hello, ack). Each decoder treats every field
// as hostile.

// challenge is the server's first message on a data connection: a fresh
// nonce the client's hello must be bound to (so a recorded hello cannot be
// replayed).
//
//	0:4   "RDMT"
//	4:6   version uint16
//	6:8   reserved (0)
//	8:24  nonce
func encodeChallenge(b []byte, nonce [16]byte) {
	copy(b[0:4], helloMagic[:])
	binary.LittleEndian.PutUint16(b[4:], Version)
	b[6], b[7] = 0, 0
	copy(b[8:24], nonce[:])
}

func decodeChallenge(b []byte) (nonce [16]byte, err error) {
	if len(b) < challengeSize {
		return nonce, fmt.Errorf("challenge of %d bytes: %w", len(b), rdmamgr.ErrProtocol)
	}
	if [4]byte(b[0:4]) != helloMagic {
		return nonce, fmt.Errorf("challenge magic %q: %w", b[0:4], rdmamgr.ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != Version {
		return nonce, fmt.Errorf("challenge version %d, want %d: %w", v, Version, rdmamgr.ErrVersion)
	}
	if b[6] != 0 || b[7] != 0 {
		return nonce, fmt.Errorf("challenge reserved bits set: %w", rdmamgr.ErrProtocol)
	}
	copy(nonce[:], b[8:24])
	return nonce, nil
}

// hello opens a data connection: magic, version, reserved, the route token
// and a MAC over the server's nonce and the token under the shared secret
// (zero when authentication is off).
//
//	0:4   "RDMT"
//	4:6   version uint16
//	6:8   reserved (0)
//	8:40  token
//	40:72 mac
func encodeHello(b []byte, token [tokenSize]byte, mac [macSize]byte) {
	copy(b[0:4], helloMagic[:])
	binary.LittleEndian.PutUint16(b[4:], Version)
	b[6], b[7] = 0, 0
	copy(b[8:40], token[:])
	copy(b[40:72], mac[:])
}

func decodeHello(b []byte) (tok [tokenSize]byte, mac [macSize]byte, err error) {
	if len(b) < helloSize {
		return tok, mac, fmt.Errorf("hello of %d bytes: %w", len(b), rdmamgr.ErrProtocol)
	}
	if [4]byte(b[0:4]) != helloMagic {
		return tok, mac, fmt.Errorf("hello magic %q: %w", b[0:4], rdmamgr.ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != Version {
		return tok, mac, fmt.Errorf("hello version %d, want %d: %w", v, Version, rdmamgr.ErrVersion)
	}
	if b[6] != 0 || b[7] != 0 {
		return tok, mac, fmt.Errorf("hello reserved bits set: %w", rdmamgr.ErrProtocol)
	}
	copy(tok[:], b[8:40])
	copy(mac[:], b[40:72])
	return tok, mac, nil
}

const labelData = "rdmamgr data hello v1"

// helloMAC binds a token to the server's nonce under the secret.
func helloMAC(s backend.Secret, nonce [16]byte, tok [tokenSize]byte) (mac [macSize]byte) {
	copy(mac[:], s.MAC(labelData, nonce[:], tok[:]))
	return mac
}

// helloAck answers a hello: magic, version, code.
func encodeHelloAck(b []byte, code byte) {
	copy(b[0:4], helloMagic[:])
	binary.LittleEndian.PutUint16(b[4:], Version)
	b[6] = code
	b[7] = 0
}

func decodeHelloAck(b []byte) (code byte, err error) {
	if len(b) < helloAckSize || [4]byte(b[0:4]) != helloMagic {
		return 0, fmt.Errorf("bad hello ack: %w", rdmamgr.ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != Version {
		return 0, fmt.Errorf("hello ack version %d: %w", v, rdmamgr.ErrVersion)
	}
	return b[6], nil
}

// initiatorInfo is the initiator's endpoint info: version, connections
// (the top bit of that field says the initiator dials its data connections
// with TLS, initiatorTLSBit; the next that it is a host agent,
// initiatorAgentBit).
func encodeInitiatorInfo(conns int) []byte {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint16(b[0:], Version)
	binary.LittleEndian.PutUint16(b[2:], uint16(conns))
	return b
}

func decodeInitiatorInfo(b []byte) (conns int, err error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("initiator info of %d bytes: %w", len(b), rdmamgr.ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[0:]); v != Version {
		return 0, fmt.Errorf("initiator version %d, want %d: %w", v, Version, rdmamgr.ErrVersion)
	}
	conns = int(binary.LittleEndian.Uint16(b[2:]) &^ (initiatorTLSBit | initiatorAgentBit))
	if conns < 1 || conns > maxConns {
		return 0, fmt.Errorf("initiator asks for %d connections (1..%d): %w", conns, maxConns, rdmamgr.ErrProtocol)
	}
	return conns, nil
}

// initiatorTLSBit in the initiator info's connection count says that the
// initiator runs its data connections over TLS (--data-tls), so that a
// responder that does not (or one that does, facing an initiator that
// does not) says so at the route handshake instead of failing each data
// connection's hello.
const initiatorTLSBit = 1 << 15

// initiatorAgentBit in the initiator info's connection count says that the
// initiator is a host agent (its backend has a resolver: via.go), so the
// route's connections may carry an origin (the process a write-imm or a
// send was posted for). Every peer proves the deployment's secret; this
// keeps processes' own routes from naming another manager as the origin.
const initiatorAgentBit = 1 << 14

// withAgent marks initiator info as a host agent's.
func withAgent(info []byte) []byte {
	binary.LittleEndian.PutUint16(info[2:], binary.LittleEndian.Uint16(info[2:])|initiatorAgentBit)
	return info
}

// initiatorAgent reports whether valid initiator info says host agent.
func initiatorAgent(info []byte) bool {
	return binary.LittleEndian.Uint16(info[2:])&initiatorAgentBit != 0
}

// withTLS marks initiator info as dialling with TLS.
func withTLS(info []byte) []byte {
	binary.LittleEndian.PutUint16(info[2:], binary.LittleEndian.Uint16(info[2:])|initiatorTLSBit)
	return info
}

// initiatorTLS reports whether valid initiator info says TLS.
func initiatorTLS(info []byte) bool {
	return binary.LittleEndian.Uint16(info[2:])&initiatorTLSBit != 0
}

// responderAgentBit in the responder info's token count says that the
// responder is a host agent (its backend has a resolver), answering
// another one (set only when the initiator info has initiatorAgentBit: an
// initiator of a build before it would read the count as too many
// tokens). An agent drops a route to a far "agent" that does not say so
// (agentapi.FarAgent).
const responderAgentBit = 1 << 14

// withResponderAgent marks responder info as a host agent's.
func withResponderAgent(info []byte) []byte {
	binary.LittleEndian.PutUint16(info[2:], binary.LittleEndian.Uint16(info[2:])|responderAgentBit)
	return info
}

// responderAgent reports whether valid responder info says host agent.
func responderAgent(info []byte) bool {
	return binary.LittleEndian.Uint16(info[2:])&responderAgentBit != 0
}

// responderInfo: version, n (responderAgentBit), addr length, addr, n tokens.
func encodeResponderInfo(addr string, tokens [][tokenSize]byte) []byte {
	b := make([]byte, 6, 6+len(addr)+len(tokens)*tokenSize)
	binary.LittleEndian.PutUint16(b[0:], Version)
	binary.LittleEndian.PutUint16(b[2:], uint16(len(tokens)))
	binary.LittleEndian.PutUint16(b[4:], uint16(len(addr)))
	b = append(b, addr...)
	for _, t := range tokens {
		b = append(b, t[:]...)
	}
	return b
}

func decodeResponderInfo(b []byte) (addr string, tokens [][tokenSize]byte, err error) {
	if len(b) < 6 {
		return "", nil, fmt.Errorf("responder info of %d bytes: %w", len(b), rdmamgr.ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[0:]); v != Version {
		return "", nil, fmt.Errorf("responder version %d, want %d: %w", v, Version, rdmamgr.ErrVersion)
	}
	n := int(binary.LittleEndian.Uint16(b[2:]) &^ responderAgentBit)
	al := int(binary.LittleEndian.Uint16(b[4:]))
	if n < 1 || n > maxConns || al < 1 || al > maxAddrSz || len(b) != 6+al+n*tokenSize {
		return "", nil, fmt.Errorf("responder info n=%d addr=%d size=%d: %w", n, al, len(b), rdmamgr.ErrProtocol)
	}
	addr = string(b[6 : 6+al])
	tokens = make([][tokenSize]byte, n)
	for i := range tokens {
		copy(tokens[i][:], b[6+al+i*tokenSize:])
	}
	return addr, tokens, nil
}
