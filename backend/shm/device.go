//go:build linux

package shm

import (
	"errors"
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// The initiator's side of device regions (CUDA IPC). A peer's device
// region is opened once per route (IPCOpenMemHandle in the route's
// context on the owner's device ordinal) when the owner's map reply
// carries its handle, kept in the route's cache like a memfd mapping, and
// closed (IPCCloseMemHandle) when its entry's last reference goes:
// evicted, cut (msgGone), refused by its slot's state, or at the route's
// end. Copies between the caller's host memory and it run on the copier,
// through the route's Stager for that device (two pinned buffers, each on
// a stream of its own: the next chunk's copy runs while this one is
// moved), and are counted in the slot's in-flight count from before the
// first copy is queued until the Stager returned, which is after the
// streams said every queued copy finished: so the owner's Revoke and
// Release wait for them. Cancellation and deadlines are checked between
// chunks; a chunk queued is never recalled, the operation reports once it
// finished.

// devChunk is the size of each of a route's two pinned staging buffers
// per device.
const devChunk = 1 << 20

// routeDev is a route's hold on one device: its primary context and a
// Stager in it.
type routeDev struct {
	d      cuda.Driver
	dev    int
	ctx    cuda.Context
	stager *cuda.Stager
	stream cuda.Stream // device-to-device copies (devlocal.go)
}

// devMap is a peer's device region opened through IPC.
type devMap struct {
	rd  *routeDev
	ptr cuda.DevicePtr // the opened allocation's base: the region's first byte
	n   uint64
}

// wantsDevice reports whether a map request for wr asks for CUDA IPC: a
// peer's device region, and a driver to open it with.
func (r *route) wantsDevice(wr *backend.WorkRequest) bool {
	return wr.Remote.Location != buffer.Host && r.b.reg.CUDA() != nil
}

// device returns the route's hold on device dev, made on first use (the
// copier's).
func (r *route) device(dev int) (*routeDev, error) {
	r.devMu.Lock()
	defer r.devMu.Unlock()
	if rd := r.devs[dev]; rd != nil {
		return rd, nil
	}
	d := r.b.reg.CUDA()
	if d == nil {
		return nil, fmt.Errorf("shm: no CUDA driver: %w", rdmamgr.ErrNotSupported)
	}
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if dev >= n {
		return nil, fmt.Errorf("shm: device %d of %d: %w", dev, n, rdmamgr.ErrNotSupported)
	}
	ctx, err := d.PrimaryContext(dev)
	if err != nil {
		return nil, err
	}
	st, err := cuda.NewStager(d, ctx, devChunk)
	if err != nil {
		_ = d.ReleasePrimaryContext(dev)
		return nil, err
	}
	s, err := d.StreamCreate(ctx)
	if err != nil {
		_ = st.Close()
		_ = d.ReleasePrimaryContext(dev)
		return nil, err
	}
	rd := &routeDev{d: d, dev: dev, ctx: ctx, stager: st, stream: s}
	if r.devs == nil {
		r.devs = make(map[int]*routeDev)
	}
	r.devs[dev] = rd
	return rd, nil
}

// closeDevices lets the route's devices go, once no entry is left (Close,
// after the gate drained: every IPC mapping is closed).
func (r *route) closeDevices() {
	r.devMu.Lock()
	defer r.devMu.Unlock()
	for dev, rd := range r.devs {
		_ = rd.stager.Close()
		_ = rd.d.StreamDestroy(rd.ctx, rd.stream)
		_ = rd.d.ReleasePrimaryContext(dev)
		delete(r.devs, dev)
	}
}

// installDevice opens the device region of a msgMappedDevice reply and
// installs it; the entry comes with a reference. A handle this process
// cannot open (another device set, a handle already open here, a forged
// one) is given back to the owner (msgUnmap) and answered NOT_SUPPORTED:
// the region goes to the fallback.
func (r *route) installDevice(id uint64, key buffer.Key, m *mappedDeviceMsg) (*entry, rdmapb.Code, error) {
	giveBack := func(err error) (*entry, rdmapb.Code, error) {
		_ = writePacket(r.conn, slotMsg(msgUnmap, m.slot, id), -1)
		if ok, dropped := r.b.logs.ended.Allow(); ok {
			r.b.log.Warn("shm: cannot open a peer's device region through CUDA IPC; its operations use the fallback",
				"peer", fmt.Sprintf("%016x", r.peerID), "region", id, "err", err, "suppressed", dropped)
		}
		return nil, rdmapb.Code_NOT_SUPPORTED, nil
	}
	rd, err := r.device(int(m.dev))
	if err != nil {
		return giveBack(err)
	}
	ptr, err := rd.d.IPCOpenMemHandle(rd.ctx, m.handle)
	if err != nil {
		return giveBack(err)
	}
	// The owner's word on the length is checked against the allocation the
	// handle opened: a longer claim would let our copies run past it.
	if base, size, err := rd.d.MemAddressRange(rd.ctx, ptr); err != nil || base != ptr || size < m.len {
		_ = rd.d.IPCCloseMemHandle(rd.ctx, ptr)
		if err == nil {
			err = fmt.Errorf("shm: the owner claims %d bytes of an allocation of %d at %#x (opened at %#x): %w", m.len, size, base, ptr, rdmamgr.ErrProtocol)
		}
		return giveBack(err)
	}
	r.ipcOpens.Add(1)
	r.b.ipcOpens.Add(1)
	e := &entry{id: id, key: key, slot: m.slot, access: m.access, dev: &devMap{rd: rd, ptr: ptr, n: m.len}}
	evicted, err := r.cache.install(e, -1, 0, 0)
	if err != nil {
		_ = rd.d.IPCCloseMemHandle(rd.ctx, ptr)
		r.fail(err)
		return nil, 0, r.st.Err()
	}
	r.tellEvicted(evicted)
	e.refs.Add(1)
	return e, rdmapb.Code_OK, nil
}

// closeDevice closes e's IPC mapping (its last reference went).
func (e *entry) closeDevice() {
	_ = e.dev.rd.d.IPCCloseMemHandle(e.dev.rd.ctx, e.dev.ptr)
}

// errCutMidCopy ends a device copy whose slot was cut between chunks.
var errCutMidCopy = errors.New("shm: cut")

// copyDevice moves wr's bytes between its local host memory and e's
// device region (the copier's). Only WRITE and READ: PutWithImm and the
// atomics on device memory through IPC are refused with ErrNotSupported.
func (r *route) copyDevice(e *entry, wr *backend.WorkRequest) error {
	if wr.Op != backend.OpWrite && wr.Op != backend.OpRead {
		r.table.word(0, wRejected).Add(1)
		return fmt.Errorf("shm: %s on a peer's device memory: %w", wr.Op, rdmamgr.ErrNotSupported)
	}
	n := uint64(len(wr.Local))
	if !e.access.Allows(wr.Op.Need()) {
		r.table.word(0, wRejected).Add(1)
		return fmt.Errorf("shm: %s to a %s buffer: %w", wr.Op, e.access, rdmamgr.ErrAccess)
	}
	if err := buffer.CheckRange(e.dev.n, wr.Remote.Offset, n); err != nil {
		r.table.word(0, wRejected).Add(1)
		return fmt.Errorf("shm: %s at %d+%d of a %d-byte device region: %w", wr.Op, wr.Remote.Offset, n, e.dev.n, err)
	}
	if st := r.table.enter(e.slot, e.id); st != stAlive {
		return r.refused(e, wr.Op, st)
	}
	var cut uint64
	if lr, ok := wr.LocalRegion.(*memreg.Region); ok && n >= pinMin && r.b.reg.PinHost(lr, e.dev.rd.dev) {
		err := r.copyLocalPinned(e, wr, &cut)
		r.table.leave(e.slot) // every copy queued was waited for
		return r.settle(e, wr, n, cut, err)
	}
	done := 0
	// Between chunks (the first one excepted): the operation's end, the
	// region's state. Nothing queued is recalled: the Stager returns once
	// the streams finished what it queued.
	check := func() error {
		if done == 0 {
			return nil
		}
		if err := r.ended(wr); err != nil {
			return err
		}
		if st := r.table.still(e.slot); st != stAlive {
			cut = st
			return errCutMidCopy
		}
		return nil
	}
	st, ptr := e.dev.rd.stager, e.dev.ptr+cuda.DevicePtr(wr.Remote.Offset)
	var err error
	if wr.Op == backend.OpWrite {
		err = st.Upload(ptr, n, func(b []byte) error {
			if err := check(); err != nil {
				return err
			}
			done += copy(b, wr.Local[done:])
			return nil
		})
	} else {
		err = st.Download(ptr, n, func(b []byte) error {
			if err := check(); err != nil {
				return err
			}
			done += copy(wr.Local[done:], b)
			return nil
		})
	}
	r.table.leave(e.slot) // after the streams finished: the owner may let the region go
	return r.settle(e, wr, n, cut, err)
}
