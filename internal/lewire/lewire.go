// Package lewire is the bounds-checked little-endian reader the wire
// decoders share (backend/shm's socket messages and route info,
// internal/agentwire's attach-socket messages): every read checks that
// the bytes are there, the first failure sticks, and nothing past the
// input is ever touched. A read after a failure returns zero values.
//
// A read past the end fails with "<Prefix>: truncated message", wrapping
// rdmamgr.ErrProtocol; callers add their own checks (versions, types,
// trailing bytes) on top and word them as they like.
package lewire

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
)

// Decoder reads fields from B and remembers the first error.
type Decoder struct {
	// B is what is left to read.
	B []byte
	// Err is the first failure (nil while every read succeeded).
	Err error
	// Prefix names the caller in the truncation error ("shm").
	Prefix string
}

// Take returns the next n bytes (capacity n: appending to them never
// writes into the input), or nil and a truncation error when fewer are
// left (or n < 0), or nil after an earlier failure.
func (d *Decoder) Take(n int) []byte {
	if d.Err != nil {
		return nil
	}
	if n < 0 || n > len(d.B) {
		d.Err = fmt.Errorf("%s: truncated message: %w", d.Prefix, rdmamgr.ErrProtocol)
		return nil
	}
	p := d.B[:n:n]
	d.B = d.B[n:]
	return p
}

// U8 reads a byte.
func (d *Decoder) U8() byte {
	if p := d.Take(1); p != nil {
		return p[0]
	}
	return 0
}

// U16 reads a little-endian uint16.
func (d *Decoder) U16() uint16 {
	if p := d.Take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

// U32 reads a little-endian uint32.
func (d *Decoder) U32() uint32 {
	if p := d.Take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

// U64 reads a little-endian uint64.
func (d *Decoder) U64() uint64 {
	if p := d.Take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}
