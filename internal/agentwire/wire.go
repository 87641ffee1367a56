package agentwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/rdmamgr/rdmamgr"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Version is the protocol's version, carried by hello and auth.
const Version = 2

// Message types: a packet's first byte.
const (
	TypeHello      = 1 // agent → P
	TypeAuth       = 2 // P → agent
	TypeShmPrepare = 3 // agent → P
	TypeShmAccept  = 4 // P → agent
	TypeWelcome    = 5 // agent → P
	TypePost       = 6 // P → agent, a batch
	TypeDone       = 7 // agent → P, a batch
	TypeCancel     = 8 // P → agent, a batch
	TypeGone       = 9 // either way, then close
)

// Sizes and bounds.
const (
	// MaxPacket bounds every packet: readers use a buffer of this size,
	// and batches stop below it.
	MaxPacket = 64 << 10
	// MaxInfo bounds the shm route info carried by shmPrepare and shmAccept.
	MaxInfo = 16 << 10
	// MaxAddr bounds an actor address.
	MaxAddr = 255
	// MaxReason bounds gone's reason.
	MaxReason = 1024
	// NonceSize is hello's nonce.
	NonceSize = 16
	// MACSize is auth's MAC (HMAC-SHA256); an agent without a secret
	// takes an empty MAC.
	MACSize = 32
	// HostIDSize is the size of a host id (shm's: boot id and namespaces).
	HostIDSize = 32
)

// ErrFull: a batch cannot take one more record; send it and start another.
var ErrFull = errors.New("agentwire: batch full")

// Type returns a packet's message type.
func Type(pkt []byte) (byte, error) {
	if len(pkt) == 0 {
		return 0, fmt.Errorf("agentwire: empty packet: %w", rdmamgr.ErrProtocol)
	}
	if pkt[0] < TypeHello || pkt[0] > TypeGone {
		return 0, fmt.Errorf("agentwire: message type %d: %w", pkt[0], rdmamgr.ErrProtocol)
	}
	return pkt[0], nil
}

// decoder reads fields and remembers the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("agentwire: "+format+": %w", append(a, rdmamgr.ErrProtocol)...)
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("truncated message")
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u8() byte {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if p := d.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// str reads a string of a u8 length, checked by checkText.
func (d *decoder) str(what string) string { return d.strAs(what, "") }

// strAs is str, returning prev (no allocation) when the text is prev's.
func (d *decoder) strAs(what, prev string) string {
	p := d.take(int(d.u8()))
	if d.err != nil {
		return ""
	}
	s := prev
	if string(p) != prev {
		s = string(p)
	}
	if err := checkText(what, s, MaxAddr); err != nil {
		d.err = err
		return ""
	}
	return s
}

// head checks the type byte.
func (d *decoder) head(typ byte) {
	if t := d.u8(); d.err == nil && t != typ {
		d.fail("message type %d, want %d", t, typ)
	}
}

// version checks a version byte.
func (d *decoder) version() {
	if v := d.u8(); d.err == nil && v != Version {
		d.err = fmt.Errorf("agentwire: version %d, ours %d: %w", v, Version, rdmamgr.ErrVersion)
	}
}

// end fails unless every byte was read.
func (d *decoder) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

// checkText refuses a string over max bytes, not UTF-8, or with control
// characters (it ends up in logs and errors).
func checkText(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("agentwire: %s of %d bytes, at most %d: %w", what, len(s), max, rdmamgr.ErrProtocol)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("agentwire: %s not UTF-8: %w", what, rdmamgr.ErrProtocol)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("agentwire: %s with control character %#x: %w", what, r, rdmamgr.ErrProtocol)
		}
	}
	return nil
}

// checkCode refuses a wire code the module does not define.
func checkCode(c uint32) error {
	if _, ok := rdmapb.Code_name[int32(c)]; !ok || c > 1<<31-1 {
		return fmt.Errorf("agentwire: code %d: %w", c, rdmamgr.ErrProtocol)
	}
	return nil
}

func appendStr(b []byte, s string) []byte {
	b = append(b, byte(len(s)))
	return append(b, s...)
}
