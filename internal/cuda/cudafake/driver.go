package cudafake

import (
	"crypto/rand"
	"encoding/binary"
	"sort"
	"unsafe"

	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// Driver is one fake process's view of the World: a cuda.Driver.
type Driver struct {
	w *World

	// Guarded by w.mu.
	next    uint64    // next device address handed out in this process
	maps    []mapping // this process's device address space, sorted by addr
	ctxRefs []int     // primary context retains per device
	host    []hostRange
	streams map[cuda.Stream]*stream
	nextSID cuda.Stream
	closed  bool
}

var _ cuda.Driver = (*Driver)(nil)

// mapping is a range of this process's device addresses: memory it
// allocated, or memory of another process it opened through IPC.
type mapping struct {
	addr   uint64
	a      *alloc
	opened bool
}

type hostRange struct {
	start, n  uintptr
	allocated bool // HostAlloc'd (else HostRegister'd)
}

// Garbage is the byte fresh device memory holds: MemAlloc does not zero,
// so code that assumes it does fails here.
const Garbage = 0xCD

// align is the granularity of fake device addresses (CUDA's is 2 MiB for
// large allocations; alignment is what matters to callers).
const align = 1 << 21

func fail(call string, r cuda.Result) error { return cuda.Check(call, r) }

// ctxLocked checks that ctx is a retained primary context and returns its
// device.
func (d *Driver) ctxLocked(call string, ctx cuda.Context) (int, error) {
	dev := int(ctx) - 1
	if d.closed || dev < 0 || dev >= len(d.ctxRefs) || d.ctxRefs[dev] == 0 {
		return 0, fail(call, cuda.ErrorInvalidContext)
	}
	return dev, nil
}

func (d *Driver) lock(call string, ctx cuda.Context) (unlock func(), err error) {
	d.w.mu.Lock()
	if _, err := d.ctxLocked(call, ctx); err != nil {
		d.w.mu.Unlock()
		return nil, err
	}
	return d.w.mu.Unlock, nil
}

// DeviceCount implements cuda.Driver.
func (d *Driver) DeviceCount() (int, error) { return d.w.cfg.Devices, nil }

// DeviceAttribute implements cuda.Driver: unified addressing yes, dma-buf
// only with Config.DmaBuf.
func (d *Driver) DeviceAttribute(dev int, a cuda.Attribute) (int, error) {
	if dev < 0 || dev >= d.w.cfg.Devices {
		return 0, fail("cuDeviceGetAttribute", cuda.ErrorInvalidDevice)
	}
	switch a {
	case cuda.AttrUnifiedAddressing:
		return 1, nil
	case cuda.AttrDmaBufSupported:
		if d.w.cfg.DmaBuf != nil {
			return 1, nil
		}
		return 0, nil
	}
	return 0, fail("cuDeviceGetAttribute", cuda.ErrorInvalidValue)
}

// PrimaryContext implements cuda.Driver.
func (d *Driver) PrimaryContext(dev int) (cuda.Context, error) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if dev < 0 || dev >= len(d.ctxRefs) {
		return 0, fail("cuDevicePrimaryCtxRetain", cuda.ErrorInvalidDevice)
	}
	if d.closed {
		return 0, fail("cuDevicePrimaryCtxRetain", cuda.ErrorDeinitialized)
	}
	d.ctxRefs[dev]++
	return cuda.Context(dev + 1), nil
}

// ReleasePrimaryContext implements cuda.Driver.
func (d *Driver) ReleasePrimaryContext(dev int) error {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if dev < 0 || dev >= len(d.ctxRefs) {
		return fail("cuDevicePrimaryCtxRelease", cuda.ErrorInvalidDevice)
	}
	if d.ctxRefs[dev] == 0 {
		return fail("cuDevicePrimaryCtxRelease", cuda.ErrorInvalidContext)
	}
	d.ctxRefs[dev]--
	return nil
}

// MemAlloc implements cuda.Driver.
func (d *Driver) MemAlloc(ctx cuda.Context, size uint64) (cuda.DevicePtr, error) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	dev, err := d.ctxLocked("cuMemAlloc", ctx)
	if err != nil {
		return 0, err
	}
	if size == 0 {
		return 0, fail("cuMemAlloc", cuda.ErrorInvalidValue)
	}
	if size > d.w.cfg.DeviceMemory-d.w.used[dev] {
		return 0, fail("cuMemAlloc", cuda.ErrorOutOfMemory)
	}
	d.w.nextID++
	a := &alloc{id: d.w.nextID, dev: dev, mem: make([]byte, size), owner: d}
	for i := range a.mem {
		a.mem[i] = Garbage // as the driver, MemAlloc does not zero
	}
	rand.Read(a.nonce[:])
	d.w.allocs[a.id] = a
	d.w.used[dev] += size
	d.w.stats.Allocs++
	d.w.stats.LiveAllocs++
	d.w.stats.LiveBytes += size
	return cuda.DevicePtr(d.mapLocked(a, false)), nil
}

// mapLocked gives a its addresses in this process.
func (d *Driver) mapLocked(a *alloc, opened bool) uint64 {
	addr := d.next
	d.next += (uint64(len(a.mem)) + 2*align - 1) &^ (align - 1) // a guard gap after each
	i := sort.Search(len(d.maps), func(i int) bool { return d.maps[i].addr > addr })
	d.maps = append(d.maps, mapping{})
	copy(d.maps[i+1:], d.maps[i:])
	d.maps[i] = mapping{addr: addr, a: a, opened: opened}
	return addr
}

// findLocked returns the index of the mapping that starts at p, or -1.
func (d *Driver) findLocked(p cuda.DevicePtr) int {
	i := sort.Search(len(d.maps), func(i int) bool { return d.maps[i].addr >= uint64(p) })
	if i < len(d.maps) && d.maps[i].addr == uint64(p) {
		return i
	}
	return -1
}

// resolveLocked returns the allocation holding [p, p+n) and p's offset in
// it (n > 0; overflow-safe).
func (d *Driver) resolveLocked(call string, p cuda.DevicePtr, n uint64) (*alloc, uint64, error) {
	i := sort.Search(len(d.maps), func(i int) bool { return d.maps[i].addr > uint64(p) }) - 1
	if i < 0 {
		return nil, 0, fail(call, cuda.ErrorInvalidValue)
	}
	m := d.maps[i]
	off := uint64(p) - m.addr
	if size := uint64(len(m.a.mem)); off >= size || n > size-off {
		return nil, 0, fail(call, cuda.ErrorInvalidValue)
	}
	return m.a, off, nil
}

// MemFree implements cuda.Driver. Memory another process still has open
// is freed all the same (its copies fail with ErrIllegalAddress) and
// counted in Stats.FreedWhileOpen: callers must not let that happen.
func (d *Driver) MemFree(ctx cuda.Context, p cuda.DevicePtr) error {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if _, err := d.ctxLocked("cuMemFree", ctx); err != nil {
		return err
	}
	i := d.findLocked(p)
	if i < 0 || d.maps[i].opened {
		return fail("cuMemFree", cuda.ErrorInvalidValue)
	}
	d.freeLocked(d.maps[i].a)
	d.maps = append(d.maps[:i], d.maps[i+1:]...)
	return nil
}

func (d *Driver) freeLocked(a *alloc) {
	a.freed = true
	delete(d.w.allocs, a.id)
	d.w.used[a.dev] -= uint64(len(a.mem))
	d.w.stats.Frees++
	d.w.stats.LiveAllocs--
	d.w.stats.LiveBytes -= uint64(len(a.mem))
	if a.opens > 0 {
		d.w.stats.FreedWhileOpen++
	}
}

// IPCGetMemHandle implements cuda.Driver: p must start an allocation of
// this process.
func (d *Driver) IPCGetMemHandle(ctx cuda.Context, p cuda.DevicePtr) (cuda.IPCHandle, error) {
	var h cuda.IPCHandle
	unlock, err := d.lock("cuIpcGetMemHandle", ctx)
	if err != nil {
		return h, err
	}
	defer unlock()
	i := d.findLocked(p)
	if i < 0 || d.maps[i].opened {
		return h, fail("cuIpcGetMemHandle", cuda.ErrorInvalidValue)
	}
	a := d.maps[i].a
	copy(h[:8], d.w.tag[:])
	binary.LittleEndian.PutUint64(h[8:16], a.id)
	copy(h[16:32], a.nonce[:])
	return h, nil
}

// IPCOpenMemHandle implements cuda.Driver.
func (d *Driver) IPCOpenMemHandle(ctx cuda.Context, h cuda.IPCHandle) (cuda.DevicePtr, error) {
	const call = "cuIpcOpenMemHandle"
	unlock, err := d.lock(call, ctx)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if [8]byte(h[:8]) != d.w.tag {
		return 0, fail(call, cuda.ErrorInvalidValue)
	}
	a, ok := d.w.allocs[binary.LittleEndian.Uint64(h[8:16])]
	switch {
	case !ok:
		return 0, fail(call, cuda.ErrorMapFailed) // freed, or never issued
	case [16]byte(h[16:32]) != a.nonce:
		return 0, fail(call, cuda.ErrorInvalidValue)
	case a.owner == d:
		return 0, fail(call, cuda.ErrorInvalidContext) // a process's own handle
	}
	for _, m := range d.maps {
		if m.a == a {
			return 0, fail(call, cuda.ErrorAlreadyMapped)
		}
	}
	a.opens++
	d.w.stats.IPCOpens++
	d.w.stats.LiveIPC++
	return cuda.DevicePtr(d.mapLocked(a, true)), nil
}

// IPCCloseMemHandle implements cuda.Driver.
func (d *Driver) IPCCloseMemHandle(ctx cuda.Context, p cuda.DevicePtr) error {
	unlock, err := d.lock("cuIpcCloseMemHandle", ctx)
	if err != nil {
		return err
	}
	defer unlock()
	i := d.findLocked(p)
	if i < 0 || !d.maps[i].opened {
		return fail("cuIpcCloseMemHandle", cuda.ErrorInvalidValue)
	}
	d.closeIPCLocked(i)
	return nil
}

func (d *Driver) closeIPCLocked(i int) {
	d.maps[i].a.opens--
	d.w.stats.IPCCloses++
	d.w.stats.LiveIPC--
	d.maps = append(d.maps[:i], d.maps[i+1:]...)
}

// MemAddressRange implements cuda.Driver: the mapping (allocated or
// opened through IPC) that holds p.
func (d *Driver) MemAddressRange(ctx cuda.Context, p cuda.DevicePtr) (cuda.DevicePtr, uint64, error) {
	const call = "cuMemGetAddressRange"
	unlock, err := d.lock(call, ctx)
	if err != nil {
		return 0, 0, err
	}
	defer unlock()
	a, off, err := d.resolveLocked(call, p, 1)
	if err != nil {
		return 0, 0, err
	}
	return p - cuda.DevicePtr(off), uint64(len(a.mem)), nil
}

// Close plays the process's exit: streams drain and stop, IPC mappings
// close, memory and pinned host ranges are freed. Idempotent; it waits.
func (d *Driver) Close() error {
	d.w.mu.Lock()
	if d.closed {
		d.w.mu.Unlock()
		return nil
	}
	d.closed = true
	streams := d.streams
	d.streams = nil
	d.w.mu.Unlock()
	for _, s := range streams {
		s.stop()
	}
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	d.w.stats.Streams -= len(streams)
	for i := len(d.maps) - 1; i >= 0; i-- {
		if d.maps[i].opened {
			d.closeIPCLocked(i)
		} else {
			d.freeLocked(d.maps[i].a)
		}
	}
	d.maps = nil
	d.w.stats.LiveHost -= len(d.host)
	d.host = nil
	return nil
}

func span(b []byte) (uintptr, uintptr) {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b))
}
