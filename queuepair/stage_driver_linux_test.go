//go:build linux

package queuepair_test

import (
	"sync"

	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
)

// queuedDriver is the stand-in telling the test each time a copy to the
// device is queued (htod; a full channel drops it).
type queuedDriver struct {
	*cudafake.Driver
	htod chan struct{}
}

func (d *queuedDriver) CopyHtoD(ctx cuda.Context, dst cuda.DevicePtr, src []byte, s cuda.Stream) error {
	err := d.Driver.CopyHtoD(ctx, dst, src, s)
	select {
	case d.htod <- struct{}{}:
	default:
	}
	return err
}

// syncDriver is a driver whose copies run synchronously on device memory
// of its own, allocating nothing per call (the stand-in's streams
// allocate per copy): for the allocation test. Contexts, pinning and the
// rest come from the stand-in.
type syncDriver struct {
	*cudafake.Driver
	mu   sync.Mutex
	mem  []byte
	next uint64
}

const syncBase = 1 << 40

func (d *syncDriver) MemAlloc(_ cuda.Context, size uint64) (cuda.DevicePtr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.next
	d.next += (size + 4095) &^ 4095
	if d.next > uint64(len(d.mem)) {
		return 0, &cuda.Error{Call: "cuMemAlloc", Code: cuda.ErrorOutOfMemory}
	}
	return cuda.DevicePtr(syncBase + p), nil
}

func (d *syncDriver) MemFree(cuda.Context, cuda.DevicePtr) error { return nil }

func (d *syncDriver) at(p cuda.DevicePtr, n uint64) []byte {
	off := uint64(p) - syncBase
	return d.mem[off : off+n]
}

func (d *syncDriver) MemsetAsync(_ cuda.Context, dst cuda.DevicePtr, v byte, n uint64, _ cuda.Stream) error {
	b := d.at(dst, n)
	for i := range b {
		b[i] = v
	}
	return nil
}

func (d *syncDriver) CopyHtoD(_ cuda.Context, dst cuda.DevicePtr, src []byte, _ cuda.Stream) error {
	copy(d.at(dst, uint64(len(src))), src)
	return nil
}

func (d *syncDriver) CopyDtoH(_ cuda.Context, dst []byte, src cuda.DevicePtr, _ cuda.Stream) error {
	copy(dst, d.at(src, uint64(len(dst))))
	return nil
}

func (d *syncDriver) StreamCreate(cuda.Context) (cuda.Stream, error)      { return 1, nil }
func (d *syncDriver) StreamDestroy(cuda.Context, cuda.Stream) error       { return nil }
func (d *syncDriver) StreamSynchronize(cuda.Context, cuda.Stream) error   { return nil }
func (d *syncDriver) StreamQuery(cuda.Context, cuda.Stream) (bool, error) { return true, nil }
