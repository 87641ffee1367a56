package agentwire

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/lewire"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Version is the protocol's version: hello carries HelloVersion (an
// older process refuses any other), auth the version the process speaks,
// Version or MinVersion (an older agent refuses any other than its own:
// the process then attaches again with MinVersion). Version 3 added ask
// and answer.
const (
	Version      = 3
	MinVersion   = 2
	HelloVersion = 2
)

// Message types: a packet's first byte.
const (
	TypeHello      = 1  // agent → P
	TypeAuth       = 2  // P → agent
	TypeShmPrepare = 3  // agent → P
	TypeShmAccept  = 4  // P → agent
	TypeWelcome    = 5  // agent → P
	TypePost       = 6  // P → agent, a batch
	TypeDone       = 7  // agent → P, a batch
	TypeCancel     = 8  // P → agent, a batch
	TypeGone       = 9  // either way, then close
	TypeAsk        = 10 // P → agent, version 3
	TypeAnswer     = 11 // agent → P, version 3
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
	if pkt[0] < TypeHello || pkt[0] > TypeAnswer {
		return 0, fmt.Errorf("agentwire: message type %d: %w", pkt[0], rdmamgr.ErrProtocol)
	}
	return pkt[0], nil
}

// decoder reads fields and remembers the first error (lewire's reads:
// a read past the end fails with "agentwire: truncated message", ErrProtocol).
type decoder struct{ lewire.Decoder }

func newDecoder(p []byte) decoder { return decoder{lewire.Decoder{B: p, Prefix: "agentwire"}} }

func (d *decoder) fail(format string, a ...any) {
	if d.Err == nil {
		d.Err = fmt.Errorf("agentwire: "+format+": %w", append(a, rdmamgr.ErrProtocol)...)
	}
}

// str reads a string of a u8 length, checked by checkText.
func (d *decoder) str(what string) string { return d.strAs(what, "") }

// strAs is str, returning prev (no allocation) when the text is prev's.
func (d *decoder) strAs(what, prev string) string {
	p := d.Take(int(d.U8()))
	if d.Err != nil {
		return ""
	}
	s := prev
	if string(p) != prev {
		s = string(p)
	}
	if err := checkText(what, s, MaxAddr); err != nil {
		d.Err = err
		return ""
	}
	return s
}

// head checks the type byte.
func (d *decoder) head(typ byte) {
	if t := d.U8(); d.Err == nil && t != typ {
		d.fail("message type %d, want %d", t, typ)
	}
}

// version reads a version byte and checks it is within [lo, hi].
func (d *decoder) version(lo, hi byte) byte {
	v := d.U8()
	if d.Err == nil && (v < lo || v > hi) {
		d.Err = fmt.Errorf("agentwire: version %d, ours %d to %d: %w", v, lo, hi, rdmamgr.ErrVersion)
	}
	return v
}

// end fails unless every byte was read.
func (d *decoder) end() error {
	if d.Err == nil && len(d.B) != 0 {
		d.fail("%d trailing bytes", len(d.B))
	}
	return d.Err
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
