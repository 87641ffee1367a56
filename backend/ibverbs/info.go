package ibverbs

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
)

// The route info is what each side of a route hands the other through the
// managers' handshake: enough to move an RC queue pair to RTR. It has a
// fixed binary layout, big-endian:
//
//	off size field
//	  0    1 version (infoVersion 2, or infoVersionFB 3: below)
//	  1    1 path MTU the sender can do (enum ibv_mtu: 1=256 .. 5=4096)
//	  2    1 responder resources: RDMA READs and atomics the sender
//	         accepts in flight
//	  3    1 flags: infoAtomics (the sender's device runs atomics, both
//	         ways), infoAgent (the sender is a host agent: its backend
//	         has a resolver, see via.go); other bits must be 0
//	  4    4 queue pair number (24 bits, >= 2)
//	  8    4 initial packet sequence number (24 bits)
//	 12    2 LID (InfiniBand; 0 on RoCE)
//	 14    2 reserved (must be 0)
//	 16   16 GID (RoCE: the port's GID at the sender's GID index)
//	 32    2 receive slots: control messages the sender's queue pair
//	         takes in flight (1..maxRecvSlots; see ctl.go)
//	 34    2 reserved (must be 0)
//	 36    4 largest Send message the sender takes, bytes (0..maxSendLimit)
//
// Version 3 is version 2's 40 bytes followed by the sender's TCP
// fallback (fallback.go): the fallback backend's kind (1 byte of length,
// at most maxFallbackKind, then the kind) and its own route info (2 bytes
// of length, at most maxFallbackInfo, then the info). An empty kind (and
// no info) says "no fallback". An initiator with a fallback sends version
// 3; one without sends version 2, as before. A responder answers in the
// version it was sent, so an older initiator (version 2) still gets its
// route, without a fallback. An older responder refuses version 3 with
// rdmamgr.ErrVersion (the initiating manager takes its next backend: see
// doc.go, "The TCP fallback").
//
// Version 1 (32 bytes, no flags, no receive slots) carried Put and Get
// only. infoAgent came later within version 2: only host agents set it
// (a backend with a resolver), and an older peer refuses their info with
// rdmamgr.ErrProtocol, so a route between an agent and an older manager
// is not set up (on either side), rather than set up without the agent's
// verbs. A decoder treats every field as hostile: a version other than 2 or 3
// is rdmamgr.ErrVersion, anything else malformed is rdmamgr.ErrProtocol.
const (
	infoVersion   = 2 // the base layout, without a fallback
	infoVersionFB = 3 // the base layout and the fallback's
	infoSize      = 40

	maxFallbackKind = 16
	maxFallbackInfo = 4096

	infoAtomics = 1
	infoAgent   = 2

	maxRecvSlots = 4096
	maxSendLimit = 1 << 20
)

// routeInfo is the decoded form of the route info.
type routeInfo struct {
	mtu       uint8
	rdAtom    uint8
	flags     uint8
	qpn       uint32
	psn       uint32
	lid       uint16
	gid       [16]byte
	recvSlots uint16
	maxSend   uint32
	version   uint8 // set by decode; encode writes infoVersionFB with fb, else infoVersion
	// fb is the sender's fallback (version 3; nil in version 2). A
	// pointer keeps routeInfo comparable.
	fb *fallbackInfo
}

// fallbackInfo is the fallback part of a version 3 route info: the
// fallback backend's kind ("" for none) and its own route info.
type fallbackInfo struct {
	kind string
	info []byte
}

func (ri *routeInfo) encode() []byte {
	n := infoSize
	if ri.fb != nil {
		n += 1 + len(ri.fb.kind) + 2 + len(ri.fb.info)
	}
	b := make([]byte, infoSize, n)
	b[0] = infoVersion
	if ri.fb != nil {
		b[0] = infoVersionFB
	}
	b[1] = ri.mtu
	b[2] = ri.rdAtom
	b[3] = ri.flags
	binary.BigEndian.PutUint32(b[4:], ri.qpn)
	binary.BigEndian.PutUint32(b[8:], ri.psn)
	binary.BigEndian.PutUint16(b[12:], ri.lid)
	copy(b[16:], ri.gid[:])
	binary.BigEndian.PutUint16(b[32:], ri.recvSlots)
	binary.BigEndian.PutUint32(b[36:], ri.maxSend)
	if ri.fb != nil {
		b = append(b, byte(len(ri.fb.kind)))
		b = append(b, ri.fb.kind...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(ri.fb.info)))
		b = append(b, ri.fb.info...)
	}
	return b
}

func decodeRouteInfo(b []byte) (routeInfo, error) {
	var ri routeInfo
	if len(b) == 0 {
		return ri, fmt.Errorf("ibverbs: empty route info: %w", rdmamgr.ErrProtocol)
	}
	if b[0] != infoVersion && b[0] != infoVersionFB {
		return ri, fmt.Errorf("ibverbs: route info version %d, want %d or %d: %w", b[0], infoVersion, infoVersionFB, rdmamgr.ErrVersion)
	}
	if b[0] == infoVersionFB {
		if len(b) < infoSize {
			return ri, fmt.Errorf("ibverbs: route info of %d bytes, want at least %d: %w", len(b), infoSize, rdmamgr.ErrProtocol)
		}
		fb, err := decodeFallbackInfo(b[infoSize:])
		if err != nil {
			return ri, err
		}
		ri.fb, b = fb, b[:infoSize]
	}
	if len(b) != infoSize {
		return ri, fmt.Errorf("ibverbs: route info of %d bytes, want %d: %w", len(b), infoSize, rdmamgr.ErrProtocol)
	}
	ri.version = infoVersion
	if ri.fb != nil {
		ri.version = infoVersionFB
	}
	ri.mtu = b[1]
	ri.rdAtom = b[2]
	ri.flags = b[3]
	ri.qpn = binary.BigEndian.Uint32(b[4:])
	ri.psn = binary.BigEndian.Uint32(b[8:])
	ri.lid = binary.BigEndian.Uint16(b[12:])
	copy(ri.gid[:], b[16:32])
	ri.recvSlots = binary.BigEndian.Uint16(b[32:])
	ri.maxSend = binary.BigEndian.Uint32(b[36:])
	switch {
	case b[3]&^(infoAtomics|infoAgent) != 0:
		return ri, fmt.Errorf("ibverbs: route info flags %#x: %w", b[3], rdmamgr.ErrProtocol)
	case b[14] != 0 || b[15] != 0 || b[34] != 0 || b[35] != 0:
		return ri, fmt.Errorf("ibverbs: route info reserved bytes set: %w", rdmamgr.ErrProtocol)
	case ri.mtu < 1 || ri.mtu > 5:
		return ri, fmt.Errorf("ibverbs: route info path MTU %d not in 1..5: %w", ri.mtu, rdmamgr.ErrProtocol)
	case ri.rdAtom == 0:
		return ri, fmt.Errorf("ibverbs: route info with no responder resources: %w", rdmamgr.ErrProtocol)
	case ri.qpn < 2 || ri.qpn > 0xFFFFFF:
		return ri, fmt.Errorf("ibverbs: route info queue pair number %#x: %w", ri.qpn, rdmamgr.ErrProtocol)
	case ri.psn > 0xFFFFFF:
		return ri, fmt.Errorf("ibverbs: route info PSN %#x exceeds 24 bits: %w", ri.psn, rdmamgr.ErrProtocol)
	case ri.recvSlots == 0 || ri.recvSlots > maxRecvSlots:
		return ri, fmt.Errorf("ibverbs: route info with %d receive slots: %w", ri.recvSlots, rdmamgr.ErrProtocol)
	case ri.maxSend > maxSendLimit:
		return ri, fmt.Errorf("ibverbs: route info with a largest message of %d bytes: %w", ri.maxSend, rdmamgr.ErrProtocol)
	}
	return ri, nil
}

// decodeFallbackInfo decodes the fallback part of a version 3 route
// info: all of b, nothing left over.
func decodeFallbackInfo(b []byte) (*fallbackInfo, error) {
	bad := func(what string) (*fallbackInfo, error) {
		return nil, fmt.Errorf("ibverbs: route info's fallback: %s: %w", what, rdmamgr.ErrProtocol)
	}
	if len(b) < 1 {
		return bad("missing")
	}
	k := int(b[0])
	if k > maxFallbackKind {
		return bad(fmt.Sprintf("kind of %d bytes, limit %d", k, maxFallbackKind))
	}
	if len(b) < 1+k+2 {
		return bad("truncated")
	}
	kind := b[1 : 1+k]
	for _, c := range kind {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return bad(fmt.Sprintf("kind %q", kind))
		}
	}
	n := int(binary.BigEndian.Uint16(b[1+k:]))
	switch {
	case n > maxFallbackInfo:
		return bad(fmt.Sprintf("info of %d bytes, limit %d", n, maxFallbackInfo))
	case len(b) != 1+k+2+n:
		return bad(fmt.Sprintf("%d bytes, want %d", len(b), 1+k+2+n))
	case k == 0 && n != 0:
		return bad("info without a kind")
	}
	return &fallbackInfo{kind: string(kind), info: append([]byte(nil), b[3+k:]...)}, nil
}

// checkAddress validates the peer's address fields for our link layer:
// RoCE needs a unicast GID, InfiniBand a unicast LID.
func (ri *routeInfo) checkAddress(ethernet bool) error {
	if ethernet {
		if ri.gid == ([16]byte{}) {
			return fmt.Errorf("ibverbs: route info without a GID on RoCE: %w", rdmamgr.ErrProtocol)
		}
		if ri.gid[0] == 0xff {
			return fmt.Errorf("ibverbs: route info with a multicast GID: %w", rdmamgr.ErrProtocol)
		}
		return nil
	}
	if ri.lid == 0 || ri.lid >= 0xC000 {
		return fmt.Errorf("ibverbs: route info LID %#x is not a unicast LID: %w", ri.lid, rdmamgr.ErrProtocol)
	}
	return nil
}

// mtuBytes converts an ibv_mtu enum to bytes (0 for an invalid value).
func mtuBytes(m int) int {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << m
}
