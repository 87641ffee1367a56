package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Protocol constants.
const (
	// Version of the data protocol and route info.
	Version = 1

	reqHeaderSize  = 48
	respHeaderSize = 16
	challengeSize  = 24
	helloSize      = 72
	macSize        = 32
	helloAckSize   = 8
	tokenSize      = 32

	opWrite   = byte(backend.OpWrite)
	opRead    = byte(backend.OpRead)
	opPing    = 3 // heartbeat: no key, region, offset or payload
	respFlag  = 0x80
	maxConns  = 64
	maxAddrSz = 512
)

var helloMagic = [4]byte{'R', 'D', 'M', 'T'}

// reqHeader is a request frame header.
//
//	0     op (1 write, 2 read)
//	1     flags (0)
//	2:4   reserved (0)
//	4:8   length  uint32
//	8:16  wrid    uint64
//	16:24 region  uint64
//	24:32 offset  uint64
//	32:48 key     [16]byte
type reqHeader struct {
	op     byte
	length uint32
	wrid   uint64
	region uint64
	offset uint64
	key    buffer.Key
}

func (h *reqHeader) encode(b []byte) {
	_ = b[reqHeaderSize-1]
	b[0] = h.op
	b[1] = 0
	b[2], b[3] = 0, 0
	binary.LittleEndian.PutUint32(b[4:], h.length)
	binary.LittleEndian.PutUint64(b[8:], h.wrid)
	binary.LittleEndian.PutUint64(b[16:], h.region)
	binary.LittleEndian.PutUint64(b[24:], h.offset)
	copy(b[32:48], h.key[:])
}

// decode parses and validates the fixed fields; maxLen bounds length.
func (h *reqHeader) decode(b []byte, maxLen uint32) error {
	if len(b) < reqHeaderSize {
		return fmt.Errorf("request header of %d bytes: %w", len(b), backend.ErrProtocol)
	}
	h.op = b[0]
	if h.op != opWrite && h.op != opRead && h.op != opPing {
		return fmt.Errorf("request op %#x: %w", h.op, backend.ErrProtocol)
	}
	if b[1] != 0 || b[2] != 0 || b[3] != 0 {
		return fmt.Errorf("request reserved bits set: %w", backend.ErrProtocol)
	}
	h.length = binary.LittleEndian.Uint32(b[4:])
	if h.op == opPing {
		// A ping carries a wrid and nothing else.
		for _, c := range b[4:8] {
			if c != 0 {
				return fmt.Errorf("ping with a length: %w", backend.ErrProtocol)
			}
		}
		for _, c := range b[16:reqHeaderSize] {
			if c != 0 {
				return fmt.Errorf("ping with a target: %w", backend.ErrProtocol)
			}
		}
		h.length, h.region, h.offset, h.key = 0, 0, 0, buffer.Key{}
		h.wrid = binary.LittleEndian.Uint64(b[8:])
		return nil
	}
	if h.length == 0 || h.length > maxLen {
		return fmt.Errorf("request length %d (max %d): %w", h.length, maxLen, backend.ErrProtocol)
	}
	h.wrid = binary.LittleEndian.Uint64(b[8:])
	h.region = binary.LittleEndian.Uint64(b[16:])
	h.offset = binary.LittleEndian.Uint64(b[24:])
	copy(h.key[:], b[32:48])
	return nil
}

// respHeader is a response frame header.
//
//	0     op | 0x80
//	1     code (rdmapb.Code; 0 = OK)
//	2:4   reserved (0)
//	4:8   length uint32 (payload bytes that follow; READ with code 0 only)
//	8:16  wrid   uint64
type respHeader struct {
	op     byte
	code   byte
	length uint32
	wrid   uint64
}

func (h *respHeader) encode(b []byte) {
	_ = b[respHeaderSize-1]
	b[0] = h.op | respFlag
	b[1] = h.code
	b[2], b[3] = 0, 0
	binary.LittleEndian.PutUint32(b[4:], h.length)
	binary.LittleEndian.PutUint64(b[8:], h.wrid)
}

func (h *respHeader) decode(b []byte) error {
	if len(b) < respHeaderSize {
		return fmt.Errorf("response header of %d bytes: %w", len(b), backend.ErrProtocol)
	}
	if b[0]&respFlag == 0 {
		return fmt.Errorf("response without response flag: %w", backend.ErrProtocol)
	}
	h.op = b[0] &^ respFlag
	if h.op != opWrite && h.op != opRead && h.op != opPing {
		return fmt.Errorf("response op %#x: %w", h.op, backend.ErrProtocol)
	}
	if b[2] != 0 || b[3] != 0 {
		return fmt.Errorf("response reserved bits set: %w", backend.ErrProtocol)
	}
	h.code = b[1]
	h.length = binary.LittleEndian.Uint32(b[4:])
	h.wrid = binary.LittleEndian.Uint64(b[8:])
	if h.length != 0 && (h.op != opRead || h.code != 0) {
		return fmt.Errorf("response payload on %#x code %d: %w", h.op, h.code, backend.ErrProtocol)
	}
	if h.op == opPing && h.code != 0 {
		return fmt.Errorf("ping answered with code %d: %w", h.code, backend.ErrProtocol)
	}
	return nil
}

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
		return nonce, fmt.Errorf("challenge of %d bytes: %w", len(b), backend.ErrProtocol)
	}
	if [4]byte(b[0:4]) != helloMagic {
		return nonce, fmt.Errorf("challenge magic %q: %w", b[0:4], backend.ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != Version {
		return nonce, fmt.Errorf("challenge version %d, want %d: %w", v, Version, backend.ErrVersion)
	}
	if b[6] != 0 || b[7] != 0 {
		return nonce, fmt.Errorf("challenge reserved bits set: %w", backend.ErrProtocol)
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
		return tok, mac, fmt.Errorf("hello of %d bytes: %w", len(b), backend.ErrProtocol)
	}
	if [4]byte(b[0:4]) != helloMagic {
		return tok, mac, fmt.Errorf("hello magic %q: %w", b[0:4], backend.ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != Version {
		return tok, mac, fmt.Errorf("hello version %d, want %d: %w", v, Version, backend.ErrVersion)
	}
	if b[6] != 0 || b[7] != 0 {
		return tok, mac, fmt.Errorf("hello reserved bits set: %w", backend.ErrProtocol)
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
		return 0, fmt.Errorf("bad hello ack: %w", backend.ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != Version {
		return 0, fmt.Errorf("hello ack version %d: %w", v, backend.ErrVersion)
	}
	return b[6], nil
}

// initiatorInfo is the initiator's endpoint info: version, connections.
func encodeInitiatorInfo(conns int) []byte {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint16(b[0:], Version)
	binary.LittleEndian.PutUint16(b[2:], uint16(conns))
	return b
}

func decodeInitiatorInfo(b []byte) (conns int, err error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("initiator info of %d bytes: %w", len(b), backend.ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[0:]); v != Version {
		return 0, fmt.Errorf("initiator version %d, want %d: %w", v, Version, backend.ErrVersion)
	}
	conns = int(binary.LittleEndian.Uint16(b[2:]))
	if conns < 1 || conns > maxConns {
		return 0, fmt.Errorf("initiator asks for %d connections (1..%d): %w", conns, maxConns, backend.ErrProtocol)
	}
	return conns, nil
}

// responderInfo: version, n, addr length, addr, n tokens.
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
		return "", nil, fmt.Errorf("responder info of %d bytes: %w", len(b), backend.ErrProtocol)
	}
	if v := binary.LittleEndian.Uint16(b[0:]); v != Version {
		return "", nil, fmt.Errorf("responder version %d, want %d: %w", v, Version, backend.ErrVersion)
	}
	n := int(binary.LittleEndian.Uint16(b[2:]))
	al := int(binary.LittleEndian.Uint16(b[4:]))
	if n < 1 || n > maxConns || al < 1 || al > maxAddrSz || len(b) != 6+al+n*tokenSize {
		return "", nil, fmt.Errorf("responder info n=%d addr=%d size=%d: %w", n, al, len(b), backend.ErrProtocol)
	}
	addr = string(b[6 : 6+al])
	tokens = make([][tokenSize]byte, n)
	for i := range tokens {
		copy(tokens[i][:], b[6+al+i*tokenSize:])
	}
	return addr, tokens, nil
}
