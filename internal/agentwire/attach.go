package agentwire

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// MACLabel is the label of auth's MAC.
const MACLabel = "rdmamgr-agent"

// Hello opens the attach handshake (agent → P).
type Hello struct {
	Nonce [NonceSize]byte
	// AgentID is the agent's manager id, not 0: the peer id P's shm
	// backend accepts the agent's route for.
	AgentID uint64
}

// Encode returns the packet; it fails on a field DecodeHello would refuse.
func (h *Hello) Encode() ([]byte, error) {
	if h.AgentID == 0 {
		return nil, fmt.Errorf("agentwire: hello without agent id: %w", rdmamgr.ErrProtocol)
	}
	b := []byte{TypeHello, HelloVersion}
	b = append(b, h.Nonce[:]...)
	return binary.LittleEndian.AppendUint64(b, h.AgentID), nil
}

// DecodeHello checks and decodes a hello packet.
func DecodeHello(pkt []byte) (Hello, error) {
	var h Hello
	d := newDecoder(pkt)
	d.head(TypeHello)
	d.version(HelloVersion, HelloVersion)
	copy(h.Nonce[:], d.Take(NonceSize))
	h.AgentID = d.U64()
	if err := d.end(); err != nil {
		return Hello{}, err
	}
	if h.AgentID == 0 {
		return Hello{}, fmt.Errorf("agentwire: hello without agent id: %w", rdmamgr.ErrProtocol)
	}
	return h, nil
}

// Auth answers hello (P → agent).
type Auth struct {
	// Version is the version the process speaks: MinVersion or Version
	// (0 encodes as Version).
	Version   byte
	MAC       []byte // MACSize bytes, or none when the deployment has no secret
	PID       uint32 // the process's pid, as SO_PEERCRED will say
	ManagerID uint64 // its manager's id, not 0
	Addr      string // its manager's actor address, not empty
}

// AuthMAC returns auth's MAC: HMAC(secret, MACLabel, nonce, pid, manager
// id, address); nil when secret is not enabled.
func AuthMAC(secret backend.Secret, nonce [NonceSize]byte, pid uint32, managerID uint64, addr string) []byte {
	var p [4]byte
	var m [8]byte
	binary.LittleEndian.PutUint32(p[:], pid)
	binary.LittleEndian.PutUint64(m[:], managerID)
	return secret.MAC(MACLabel, nonce[:], p[:], m[:], []byte(addr))
}

// Verify checks a's MAC against nonce in constant time (any MAC verifies
// when secret is not enabled) and returns rdmamgr.ErrUnauthenticated if
// it does not.
func (a *Auth) Verify(secret backend.Secret, nonce [NonceSize]byte) error {
	if !secret.Enabled() {
		return nil
	}
	var p [4]byte
	var m [8]byte
	binary.LittleEndian.PutUint32(p[:], a.PID)
	binary.LittleEndian.PutUint64(m[:], a.ManagerID)
	if !secret.Verify(a.MAC, MACLabel, nonce[:], p[:], m[:], []byte(a.Addr)) {
		return fmt.Errorf("agentwire: attach MAC of pid %d: %w", a.PID, rdmamgr.ErrUnauthenticated)
	}
	return nil
}

func (a *Auth) check() error {
	switch {
	case len(a.MAC) != 0 && len(a.MAC) != MACSize:
		return fmt.Errorf("agentwire: MAC of %d bytes: %w", len(a.MAC), rdmamgr.ErrProtocol)
	case a.PID == 0:
		return fmt.Errorf("agentwire: auth without pid: %w", rdmamgr.ErrProtocol)
	case a.ManagerID == 0:
		return fmt.Errorf("agentwire: auth without manager id: %w", rdmamgr.ErrProtocol)
	case a.Addr == "":
		return fmt.Errorf("agentwire: auth without address: %w", rdmamgr.ErrProtocol)
	}
	return checkText("address", a.Addr, MaxAddr)
}

// Encode returns the packet; it fails on a field DecodeAuth would refuse.
func (a *Auth) Encode() ([]byte, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	v := a.Version
	if v == 0 {
		v = Version
	}
	if v < MinVersion || v > Version {
		return nil, fmt.Errorf("agentwire: auth of version %d: %w", v, rdmamgr.ErrInvalid)
	}
	b := []byte{TypeAuth, v, byte(len(a.MAC))}
	b = append(b, a.MAC...)
	b = binary.LittleEndian.AppendUint32(b, a.PID)
	b = binary.LittleEndian.AppendUint64(b, a.ManagerID)
	return appendStr(b, a.Addr), nil
}

// DecodeAuth checks and decodes an auth packet (not its MAC: Verify).
func DecodeAuth(pkt []byte) (Auth, error) {
	var a Auth
	d := newDecoder(pkt)
	d.head(TypeAuth)
	a.Version = d.version(MinVersion, Version)
	if mac := d.Take(int(d.U8())); len(mac) > 0 {
		a.MAC = append([]byte(nil), mac...)
	}
	a.PID, a.ManagerID = d.U32(), d.U64()
	a.Addr = d.str("address")
	if err := d.end(); err != nil {
		return Auth{}, err
	}
	if err := a.check(); err != nil {
		return Auth{}, err
	}
	return a, nil
}

// EncodeInfo returns a shmPrepare (agent → P) or shmAccept (P → agent)
// packet carrying shm route info; it fails when info is empty or over
// MaxInfo.
func EncodeInfo(typ byte, info []byte) ([]byte, error) {
	if typ != TypeShmPrepare && typ != TypeShmAccept {
		return nil, fmt.Errorf("agentwire: info in message type %d: %w", typ, rdmamgr.ErrInvalid)
	}
	if len(info) == 0 || len(info) > MaxInfo {
		return nil, fmt.Errorf("agentwire: route info of %d bytes: %w", len(info), rdmamgr.ErrProtocol)
	}
	b := make([]byte, 0, 5+len(info))
	b = append(b, typ)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(info)))
	return append(b, info...), nil
}

// DecodeInfo checks and decodes a shmPrepare or shmAccept packet (typ);
// the info returned is a copy.
func DecodeInfo(typ byte, pkt []byte) ([]byte, error) {
	if typ != TypeShmPrepare && typ != TypeShmAccept {
		return nil, fmt.Errorf("agentwire: info in message type %d: %w", typ, rdmamgr.ErrInvalid)
	}
	d := newDecoder(pkt)
	d.head(typ)
	n := d.U32()
	if d.Err == nil && (n == 0 || n > MaxInfo) {
		d.fail("route info of %d bytes", n)
	}
	info := d.Take(int(n))
	if err := d.end(); err != nil {
		return nil, err
	}
	return append([]byte(nil), info...), nil
}

// Welcome ends the attach handshake (agent → P).
type Welcome struct {
	Slot       uint16 // P's slot at its agent, not 0: the via that names P
	Generation uint32 // the slot's generation (a reused slot gets a new one), not 0
	AgentAddr  string // the agent's actor address, not empty
	AgentID    uint64 // the agent's manager id, not 0
	HostID     [HostIDSize]byte
}

func (w *Welcome) check() error {
	switch {
	case w.Slot == 0:
		return fmt.Errorf("agentwire: welcome without slot: %w", rdmamgr.ErrProtocol)
	case w.Generation == 0:
		return fmt.Errorf("agentwire: welcome without generation: %w", rdmamgr.ErrProtocol)
	case w.AgentID == 0:
		return fmt.Errorf("agentwire: welcome without agent id: %w", rdmamgr.ErrProtocol)
	case w.AgentAddr == "":
		return fmt.Errorf("agentwire: welcome without agent address: %w", rdmamgr.ErrProtocol)
	case w.HostID == [HostIDSize]byte{}:
		return fmt.Errorf("agentwire: welcome without host id: %w", rdmamgr.ErrProtocol)
	}
	return checkText("agent address", w.AgentAddr, MaxAddr)
}

// Encode returns the packet; it fails on a field DecodeWelcome would refuse.
func (w *Welcome) Encode() ([]byte, error) {
	if err := w.check(); err != nil {
		return nil, err
	}
	b := []byte{TypeWelcome}
	b = binary.LittleEndian.AppendUint16(b, w.Slot)
	b = binary.LittleEndian.AppendUint32(b, w.Generation)
	b = appendStr(b, w.AgentAddr)
	b = binary.LittleEndian.AppendUint64(b, w.AgentID)
	return append(b, w.HostID[:]...), nil
}

// DecodeWelcome checks and decodes a welcome packet.
func DecodeWelcome(pkt []byte) (Welcome, error) {
	var w Welcome
	d := newDecoder(pkt)
	d.head(TypeWelcome)
	w.Slot, w.Generation = d.U16(), d.U32()
	w.AgentAddr = d.str("agent address")
	w.AgentID = d.U64()
	copy(w.HostID[:], d.Take(HostIDSize))
	if err := d.end(); err != nil {
		return Welcome{}, err
	}
	if err := w.check(); err != nil {
		return Welcome{}, err
	}
	return w, nil
}

// Gone says why the sender closes (either way).
type Gone struct {
	Code   uint32 // a wire code (rdmapb.Code), not OK
	Reason string // printable, at most MaxReason bytes
}

func (g *Gone) check() error {
	if err := checkCode(g.Code); err != nil {
		return err
	}
	if g.Code == 0 {
		return fmt.Errorf("agentwire: gone with code OK: %w", rdmamgr.ErrProtocol)
	}
	return checkText("reason", g.Reason, MaxReason)
}

// Encode returns the packet; it fails on a field DecodeGone would refuse.
func (g *Gone) Encode() ([]byte, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	b := []byte{TypeGone}
	b = binary.LittleEndian.AppendUint32(b, g.Code)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(g.Reason)))
	return append(b, g.Reason...), nil
}

// DecodeGone checks and decodes a gone packet.
func DecodeGone(pkt []byte) (Gone, error) {
	var g Gone
	d := newDecoder(pkt)
	d.head(TypeGone)
	g.Code = d.U32()
	g.Reason = string(d.Take(int(d.U16())))
	if err := d.end(); err != nil {
		return Gone{}, err
	}
	if err := g.check(); err != nil {
		return Gone{}, err
	}
	return g, nil
}

// Err returns the error gone reports: the sentinel of its code, wrapped
// with its reason (quoted: it came from the peer).
func (g *Gone) Err() error {
	s := backend.Sentinel(rdmapb.Code(g.Code))
	if s == nil {
		s = rdmamgr.ErrPeerGone
	}
	return fmt.Errorf("host agent: %s: %w", strconv.Quote(g.Reason), s)
}
