package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Protocol constants.
const (
	// Version of the data protocol and route info. The operations of
	// issue 15 (opWriteImm and on) were added without a new version: a
	// peer that does not know them closes the connection as for any
	// unknown op. The via and the origin (issue 26) came the same way:
	// only host agents send them, and a server older than them closes the
	// connection on them as on any reserved bit.
	Version = 1

	reqHeaderSize  = 48 // fixed part of every request
	reqExtSize     = 16 // operands of opWriteImm, opSend and the atomics
	reqOriginSize  = 8  // origin of opWriteImm and opSend (flagOrigin)
	reqOpsSize     = reqHeaderSize + reqExtSize
	reqMaxSize     = reqOpsSize + reqOriginSize
	respHeaderSize = 16 // fixed part of every response
	respValueSize  = 8  // an atomic's old value
	respMaxSize    = respHeaderSize + respValueSize
	trailerSize    = 1 // after the payload of opWriteImm and opSend
	challengeSize  = 24
	helloSize      = 72
	macSize        = 32
	helloAckSize   = 8
	tokenSize      = 32

	// Wire ops (not backend.Op: opPing took 3 first; wireOp maps).
	opWrite       = byte(1)
	opRead        = byte(2)
	opPing        = byte(3) // heartbeat: no key, region, offset or payload
	opWriteImm    = byte(4)
	opSend        = byte(5)
	opCompareSwap = byte(6)
	opFetchAdd    = byte(7)

	flagImm = 1 // opSend: the imm field carries an immediate value
	// flagFirst marks the first frame of a write, read or write-imm split
	// into chunks: the server counts served operations by it, not frames.
	flagFirst = 2
	// flagOrigin: a write-imm or send carries the manager it was posted
	// for (an agent posts for an attached process) in 8 more bytes.
	flagOrigin = 4
	respFlag   = 0x80
	maxConns   = 64
	maxAddrSz  = 512

	// trailer values: the initiator sends trailerAbort in place of
	// trailerCommit when it cut the payload short (a cancel swapped the
	// rest for zeros): the owner then delivers no event and no message.
	trailerCommit = 1
	trailerAbort  = 0
)

var helloMagic = [4]byte{'R', 'D', 'M', 'T'}

// reqHeader is a request frame header.
//
//	0     op (1 write, 2 read, 3 ping, 4 write-imm, 5 send, 6 compare-swap, 7 fetch-add)
//	1     flags: bit 0 has imm (send), bit 1 first frame of an op (write,
//	      read, write-imm), bit 2 origin (write-imm, send); others 0
//	2:4   via     uint16 (the target process's slot at a host agent; 0 =
//	      the server's own memory; on every frame of an op; 0 for a ping)
//	4:8   length  uint32 (payload bytes; 8 for an atomic, which has none)
//	8:16  wrid    uint64
//	16:24 region  uint64 (0 for a send)
//	24:32 offset  uint64 (0 for a send)
//	32:48 key     [16]byte (0 for a send)
//
// Ops 4 to 7 add 16 bytes of operands:
//
//	write-imm     48:52 imm, 52:56 0, 56:64 total: the event covers the
//	              total bytes that end with this frame's (earlier frames
//	              of the op are plain writes on the same connection)
//	send          48:52 imm (0 without the flag), 52:64 0
//	compare-swap  48:56 compare, 56:64 swap
//	fetch-add     48:56 0, 56:64 addend
//
// A write-imm or a send with flagOrigin adds 8 bytes after those:
//
//	64:72 origin  uint64 (the manager the agent posted it for; not 0)
//
// A server without a resolver (not a host agent) answers a request with a
// via or an origin NOT_SUPPORTED (and serves on); an agent resolves via,
// region and key to a region of its own (agentapi.Resolver) and honours
// an origin only with a via, and only on a connection of another host
// agent's route (initiatorAgentBit).
//
// A write-imm and a send end with one trailer byte after the payload:
// 1 commit, 0 abort (the initiator cut the payload short).
type reqHeader struct {
	op     byte
	hasImm bool
	first  bool   // flagFirst
	via    uint16 // bytes 2:4
	length uint32
	wrid   uint64
	region uint64
	offset uint64
	key    buffer.Key
	imm    uint32
	total  uint64
	// compare and swap are the atomics' operands (swap: the addend of
	// fetch-add).
	compare, swap uint64
	// origin is the manager a write-imm or send was posted for (0: none;
	// flagOrigin).
	origin uint64
}

// size is the encoded size of h.
func (h *reqHeader) size() int {
	if h.origin != 0 && hasTrailer(h.op) {
		return reqOpsSize + reqOriginSize
	}
	return reqSize(h.op)
}

func (h *reqHeader) encode(b []byte) {
	_ = b[h.size()-1]
	b[0] = h.op
	b[1] = 0
	if h.hasImm {
		b[1] = flagImm
	}
	if h.first {
		b[1] |= flagFirst
	}
	binary.LittleEndian.PutUint16(b[2:], h.via)
	binary.LittleEndian.PutUint32(b[4:], h.length)
	binary.LittleEndian.PutUint64(b[8:], h.wrid)
	binary.LittleEndian.PutUint64(b[16:], h.region)
	binary.LittleEndian.PutUint64(b[24:], h.offset)
	copy(b[32:48], h.key[:])
	if h.size() == reqHeaderSize {
		return
	}
	e := b[reqHeaderSize:reqOpsSize]
	switch h.op {
	case opWriteImm, opSend:
		binary.LittleEndian.PutUint32(e[0:], h.imm)
		binary.LittleEndian.PutUint32(e[4:], 0)
		binary.LittleEndian.PutUint64(e[8:], h.total)
		if h.origin != 0 {
			b[1] |= flagOrigin
			binary.LittleEndian.PutUint64(b[reqOpsSize:], h.origin)
		}
	default:
		binary.LittleEndian.PutUint64(e[0:], h.compare)
		binary.LittleEndian.PutUint64(e[8:], h.swap)
	}
}

// encodeRW writes the request header of c, a queued WRITE or READ chunk,
// into b (reqHeaderSize bytes), exactly as claim's header's encode does,
// with no reqHeader built and copied (add's common case).
func (c *chunk) encodeRW(b []byte) {
	_ = b[reqHeaderSize-1]
	wr := c.op.wr
	b[0], b[1] = c.wop, 0
	if len(c.op.chunks) > 0 && c == &c.op.chunks[0] {
		b[1] = flagFirst
	}
	binary.LittleEndian.PutUint16(b[2:], wr.Via)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(c.local)))
	binary.LittleEndian.PutUint64(b[8:], c.id)
	binary.LittleEndian.PutUint64(b[16:], c.region)
	binary.LittleEndian.PutUint64(b[24:], c.offset)
	copy(b[32:48], wr.Remote.Key[:])
}

// decode parses and validates a request header; b holds at least
// reqSizeOf(b[0], b[1]) bytes (the operands of ops 4 to 7 and the origin
// too). maxLen bounds length.
func (h *reqHeader) decode(b []byte, maxLen uint32) error {
	if len(b) < reqHeaderSize {
		return fmt.Errorf("request header of %d bytes: %w", len(b), rdmamgr.ErrProtocol)
	}
	*h = reqHeader{op: b[0]}
	if h.op < opWrite || h.op > opFetchAdd {
		return fmt.Errorf("request op %#x: %w", h.op, rdmamgr.ErrProtocol)
	}
	if len(b) < reqSizeOf(b[0], b[1]) {
		return fmt.Errorf("request header of %d bytes for op %d: %w", len(b), h.op, rdmamgr.ErrProtocol)
	}
	flags := b[1]
	if h.op == opSend {
		h.hasImm, flags = flags&flagImm != 0, flags&^flagImm
	}
	if h.op == opWrite || h.op == opRead || h.op == opWriteImm {
		h.first, flags = flags&flagFirst != 0, flags&^flagFirst
	}
	hasOrigin := false
	if hasTrailer(h.op) {
		hasOrigin, flags = flags&flagOrigin != 0, flags&^flagOrigin
	}
	if flags != 0 {
		return fmt.Errorf("request reserved bits set: %w", rdmamgr.ErrProtocol)
	}
	h.via = binary.LittleEndian.Uint16(b[2:])
	h.length = binary.LittleEndian.Uint32(b[4:])
	h.wrid = binary.LittleEndian.Uint64(b[8:])
	h.region = binary.LittleEndian.Uint64(b[16:])
	h.offset = binary.LittleEndian.Uint64(b[24:])
	copy(h.key[:], b[32:48])
	switch {
	case h.op == opPing:
		// A ping carries a wrid and nothing else.
		if h.length != 0 || h.region != 0 || h.offset != 0 || h.key != (buffer.Key{}) || h.via != 0 {
			return fmt.Errorf("ping with a length or a target: %w", rdmamgr.ErrProtocol)
		}
		return nil
	case h.op == opCompareSwap || h.op == opFetchAdd:
		if h.length != 8 {
			return fmt.Errorf("%s of %d bytes: %w", opOf(h.op), h.length, rdmamgr.ErrProtocol)
		}
	case h.length == 0 || h.length > maxLen:
		return fmt.Errorf("request length %d (max %d): %w", h.length, maxLen, rdmamgr.ErrProtocol)
	case h.op == opSend && (h.region != 0 || h.offset != 0 || h.key != (buffer.Key{})):
		return fmt.Errorf("send with a target: %w", rdmamgr.ErrProtocol)
	}
	if reqSize(h.op) == reqHeaderSize {
		return nil
	}
	if hasOrigin {
		h.origin = binary.LittleEndian.Uint64(b[reqOpsSize:])
		if h.origin == 0 {
			return fmt.Errorf("%s with origin 0: %w", opOf(h.op), rdmamgr.ErrProtocol)
		}
	}
	return h.decodeOperands(b[reqHeaderSize:reqOpsSize])
}

// decodeOperands parses the operands of ops 4 to 7; bytes an op does not
// use must be zero.
func (h *reqHeader) decodeOperands(e []byte) error {
	lo, hi := binary.LittleEndian.Uint64(e[0:]), binary.LittleEndian.Uint64(e[8:])
	switch h.op {
	case opWriteImm:
		h.imm, h.total = uint32(lo), hi
		if lo>>32 != 0 || h.total < uint64(h.length) {
			return fmt.Errorf("write-imm operands: total %d for %d bytes: %w", h.total, h.length, rdmamgr.ErrProtocol)
		}
	case opSend:
		h.imm = uint32(lo)
		if lo>>32 != 0 || hi != 0 || (!h.hasImm && h.imm != 0) {
			return fmt.Errorf("send operands: %w", rdmamgr.ErrProtocol)
		}
	case opCompareSwap:
		h.compare, h.swap = lo, hi
	case opFetchAdd:
		if lo != 0 {
			return fmt.Errorf("fetch-add operands: %w", rdmamgr.ErrProtocol)
		}
		h.swap = hi
	}
	return nil
}

// respHeader is a response frame header.
//
//	0     op | 0x80
//	1     code (rdmapb.Code; 0 = OK)
//	2:4   reserved (0)
//	4:8   length uint32 (payload bytes that follow; READ with code 0 only)
//	8:16  wrid   uint64
//
// A response to an atomic adds the word's old value (0 unless code 0):
//
//	16:24 value  uint64
type respHeader struct {
	op     byte
	code   byte
	length uint32
	wrid   uint64
	value  uint64
}

// size is the encoded size of h.
func (h *respHeader) size() int { return respSize(h.op) }

func (h *respHeader) encode(b []byte) {
	_ = b[h.size()-1]
	b[0] = h.op | respFlag
	b[1] = h.code
	b[2], b[3] = 0, 0
	binary.LittleEndian.PutUint32(b[4:], h.length)
	binary.LittleEndian.PutUint64(b[8:], h.wrid)
	if h.size() > respHeaderSize {
		binary.LittleEndian.PutUint64(b[respHeaderSize:], h.value)
	}
}

// decode parses and validates a response header; b holds at least
// respSize of its op (the old value of an atomic too).
func (h *respHeader) decode(b []byte) error {
	if len(b) < respHeaderSize {
		return fmt.Errorf("response header of %d bytes: %w", len(b), rdmamgr.ErrProtocol)
	}
	if b[0]&respFlag == 0 {
		return fmt.Errorf("response without response flag: %w", rdmamgr.ErrProtocol)
	}
	*h = respHeader{op: b[0] &^ respFlag}
	if h.op < opWrite || h.op > opFetchAdd {
		return fmt.Errorf("response op %#x: %w", h.op, rdmamgr.ErrProtocol)
	}
	if len(b) < h.size() {
		return fmt.Errorf("response header of %d bytes for op %d: %w", len(b), h.op, rdmamgr.ErrProtocol)
	}
	if b[2] != 0 || b[3] != 0 {
		return fmt.Errorf("response reserved bits set: %w", rdmamgr.ErrProtocol)
	}
	h.code = b[1]
	h.length = binary.LittleEndian.Uint32(b[4:])
	h.wrid = binary.LittleEndian.Uint64(b[8:])
	if h.size() > respHeaderSize {
		h.value = binary.LittleEndian.Uint64(b[respHeaderSize:])
	}
	if h.length != 0 && (h.op != opRead || h.code != 0) {
		return fmt.Errorf("response payload on %#x code %d: %w", h.op, h.code, rdmamgr.ErrProtocol)
	}
	if h.op == opPing && h.code != 0 {
		return fmt.Errorf("ping answered with code %d: %w", h.code, rdmamgr.ErrProtocol)
	}
	if h.value != 0 && h.code != 0 {
		return fmt.Errorf("old value on a refused %s: %w", opOf(h.op), rdmamgr.ErrProtocol)
	}
	return nil
}

// codeErr turns a wire code into the error the caller compares with.
func codeErr(op byte, code byte) error {
	return &backend.RemoteError{Code: rdmapb.Code(code), Op: opOf(op)}
}
