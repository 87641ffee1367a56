package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
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

// codeErr turns a wire code into the error the caller compares with.
func codeErr(op byte, code byte) error {
	return &backend.RemoteError{Code: rdmapb.Code(code), Op: backend.Op(op)}
}
