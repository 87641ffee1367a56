//go:build linux

package shm

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// CUDA IPC in the map request and reply (device regions).
//
// An initiator with a CUDA driver asks for a device region (a handle whose
// Location is a device) with needDevice set in the map request's access
// byte. An owner that knows the flag answers a device region it exports
// with msgMappedDevice; one that does not refuses the unknown access bit
// (ACCESS), and the initiator asks again without the flag (then gets
// NOT_SUPPORTED and uses the fallback). An owner never sends
// msgMappedDevice to a request without the flag, so an initiator that
// does not know it never sees one.
const needDevice buffer.Access = 0x80

// msgMappedDevice: owner → initiator: req, slot, length, access, device,
// IPC handle (no fd).
const msgMappedDevice = 13

// maxDeviceRegion bounds the length a device map reply may claim (memreg
// refuses larger allocations).
const maxDeviceRegion = 1 << 46

// mappedDeviceMsg answers a map request with needDevice for a device
// region the owner exports: its CUDA IPC handle (the allocation's base is
// the region's first byte), its device ordinal and length.
type mappedDeviceMsg struct {
	req    uint64
	slot   uint32
	len    uint64
	access buffer.Access
	dev    uint32
	handle cuda.IPCHandle
}

func (m *mappedDeviceMsg) encode() []byte {
	b := []byte{msgMappedDevice}
	b = binary.LittleEndian.AppendUint64(b, m.req)
	b = binary.LittleEndian.AppendUint32(b, m.slot)
	b = binary.LittleEndian.AppendUint64(b, m.len)
	b = append(b, byte(m.access))
	b = binary.LittleEndian.AppendUint32(b, m.dev)
	return append(b, m.handle[:]...)
}

// decodeMappedDevice reads a msgMappedDevice after its type byte and
// checks what can be checked without the driver: the slot, a length of
// 1..maxDeviceRegion, known access bits with read and write (the owner
// exports nothing else), a device ordinal under 1024.
func decodeMappedDevice(d *decoder) mappedDeviceMsg {
	var m mappedDeviceMsg
	m.req, m.slot, m.len = d.U64(), d.U32(), d.U64()
	m.access = buffer.Access(d.U8())
	m.dev = d.U32()
	copy(m.handle[:], d.Take(len(m.handle)))
	if d.Err != nil {
		return m
	}
	switch {
	case m.slot == 0 || m.slot >= tableSlots:
		d.Err = fmt.Errorf("shm: device map reply slot %d: %w", m.slot, rdmamgr.ErrProtocol)
	case m.len == 0 || m.len > maxDeviceRegion:
		d.Err = fmt.Errorf("shm: device map reply of %d bytes: %w", m.len, rdmamgr.ErrProtocol)
	case !m.access.Valid() || !m.access.Allows(buffer.AccessReadWrite):
		d.Err = fmt.Errorf("shm: device map reply access %#x: %w", uint8(m.access), rdmamgr.ErrProtocol)
	case m.dev >= 1024:
		d.Err = fmt.Errorf("shm: device map reply device %d: %w", m.dev, rdmamgr.ErrProtocol)
	}
	return m
}
