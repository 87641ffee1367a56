package baseline

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Every exchange on a connection starts with a fixed 24-byte header from
// the client:
//
//	[0:4]   magic "rdbl"
//	[4]     mode (modePut, modeGet, modeRR)
//	[5:7]   slots, distinct buffers of size bytes the operations cycle
//	        through (little endian; 0 means 1)
//	[7:8]   zero
//	[8:16]  size, bytes per operation (little endian)
//	[16:24] count, operations
//
// modePut: the client writes count×size bytes, the server io.ReadFull's
// each size bytes into the next of its slots and answers with 1 byte at
// the end. modeGet: the server writes count×size bytes from its slots in
// turn, the client reads them into its own. The slots give both ends the
// memory footprint of ours, whose operations in flight each use a slot of
// their own: one buffer used over and over would stay in the cache while
// ours moves memory that is not. modeRR: count requests of size bytes, each answered with size
// bytes (ping-pong with one in flight, a pipeline with many). After an
// exchange the connection takes the next header.
const (
	magic   = "rdbl"
	hdrLen  = 24
	modePut = 1
	modeGet = 2
	modeRR  = 3

	// MaxSize is the largest operation, and of slots × size, the server
	// accepts.
	MaxSize  = 1 << 30
	maxCount = 1 << 40
	maxSlots = 4096
)

type header struct {
	mode  byte
	slots uint16
	size  uint64
	count uint64
}

// nslots is the number of slots, at least 1.
func (h header) nslots() uint64 { return max(uint64(h.slots), 1) }

func (h header) encode() []byte {
	b := make([]byte, hdrLen)
	copy(b, magic)
	b[4] = h.mode
	binary.LittleEndian.PutUint16(b[5:], h.slots)
	binary.LittleEndian.PutUint64(b[8:], h.size)
	binary.LittleEndian.PutUint64(b[16:], h.count)
	return b
}

func decodeHeader(b []byte) (header, error) {
	h := header{mode: b[4], slots: binary.LittleEndian.Uint16(b[5:]), size: binary.LittleEndian.Uint64(b[8:]), count: binary.LittleEndian.Uint64(b[16:])}
	switch {
	case string(b[:4]) != magic:
		return h, errors.New("baseline: bad magic")
	case h.mode < modePut || h.mode > modeRR:
		return h, fmt.Errorf("baseline: mode %d", h.mode)
	case h.size == 0 || h.size > MaxSize:
		return h, fmt.Errorf("baseline: size %d", h.size)
	case h.slots > maxSlots || h.nslots()*h.size > MaxSize:
		return h, fmt.Errorf("baseline: %d slots of %d bytes", h.slots, h.size)
	case h.count > maxCount:
		return h, fmt.Errorf("baseline: count %d", h.count)
	}
	return h, nil
}
