//go:build linux

package shm

import "github.com/rdmamgr/rdmamgr/backend"

// RoutePaths returns how many peer device regions route rt opened through
// CUDA IPC and how many operations its fallback route counted.
func RoutePaths(rt backend.Route) (ipcOpens, fallbackOps uint64) {
	r := rt.(*route)
	if r.fb != nil {
		fallbackOps = r.fb.Stats().Ops
	}
	return r.ipcOpens.Load(), fallbackOps
}

// Device map messages for the owner-side tests.
const (
	MsgMappedDevice = msgMappedDevice
	NeedDevice      = byte(needDevice)
)

// DecodeMappedDevice decodes a msgMappedDevice (type byte included).
func DecodeMappedDevice(p []byte) (slot uint32, n uint64, dev uint32, handle [64]byte, err error) {
	d := newDecoder(p[1:])
	m := decodeMappedDevice(&d)
	return m.slot, m.len, m.dev, m.handle, d.end()
}

// IPCOpens returns how many peers' device regions b's routes opened
// through CUDA IPC.
func (b *Backend) IPCOpens() uint64 { return b.ipcOpens.Load() }
