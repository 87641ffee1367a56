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
)

// The caller's own device memory as a Put's source or a Get's
// destination, handed to the route as is (queuepair's DeviceLocalRoute:
// WorkRequest.Local nil, LocalRegion a *memreg.DeviceSpan valid until
// the request completes). Such an operation always runs on the copier:
//
//   - a peer's device region opened through IPC: device-to-device copies
//     (CopyDtoD) on the route's stream for that device, in chunks of
//     devDtoDChunk, each waited for before the next check of the
//     operation's end and the slot's state;
//   - a peer's memfd-backed host region: through the route's Stager for
//     the local device (device to pinned buffer to the mapping, or back),
//     pipelined;
//   - a region on the fallback: through the same Stager, each chunk an
//     inner Put or Get of the pinned buffer on the fallback route, waited
//     for before the buffer is reused (a cancel of the operation is passed
//     to the inner one).
//
// In the first two the slot's in-flight count covers every queued copy
// until the streams finished, as for a host local. The route's Stats
// count no bytes for these operations (their Local is empty).

// devDtoDChunk is how much one device-to-device copy moves between the
// checks (at about 1 TB/s, some 60 µs).
const devDtoDChunk = 64 << 20

// deviceLocal returns wr's local device memory when the queue pair handed
// it as is.
func deviceLocal(wr *backend.WorkRequest) (*memreg.DeviceSpan, bool) {
	if wr.Local != nil {
		return nil, false
	}
	s, ok := wr.LocalRegion.(*memreg.DeviceSpan)
	return s, ok && s != nil
}

// TakesDeviceLocal implements queuepair.DeviceLocalRoute: with a CUDA
// driver, a Put from or a Get into the caller's device memory comes to
// the route as is.
func (r *route) TakesDeviceLocal() bool { return r.b.reg.CUDA() != nil }

// validateDeviceLocal checks a device-local operation as Post's
// validation does a host one.
func validateDeviceLocal(wr *backend.WorkRequest, s *memreg.DeviceSpan) error {
	if wr.Op != backend.OpWrite && wr.Op != backend.OpRead {
		return fmt.Errorf("shm: %s from device memory: %w", wr.Op, rdmamgr.ErrNotSupported)
	}
	if s.Len == 0 || s.Len != wr.Remote.Length {
		return fmt.Errorf("shm: local %d bytes of device memory, remote %d: %w", s.Len, wr.Remote.Length, rdmamgr.ErrProtocol)
	}
	if wr.Remote.Offset+s.Len < wr.Remote.Offset {
		return fmt.Errorf("shm: remote offset %d + %d bytes overflows: %w", wr.Remote.Offset, s.Len, rdmamgr.ErrOutOfRange)
	}
	return nil
}

// runDeviceLocal runs a device-local operation on region entry e (the
// copier's).
func (r *route) runDeviceLocal(e *entry, wr *backend.WorkRequest, s *memreg.DeviceSpan) error {
	rd, err := r.device(s.Dev)
	if err != nil {
		return err
	}
	if rd.d != s.Driver || rd.ctx != s.Ctx {
		return fmt.Errorf("shm: device memory of another driver or context: %w", rdmamgr.ErrNotSupported)
	}
	switch {
	case e.fallback:
		return r.stageFallback(rd, wr, s)
	case e.dev != nil:
		return r.copyDtoD(e, wr, s)
	}
	return r.copyDeviceHost(rd, e, wr, s)
}

// checkChunk is the check between two chunks of a device-local copy.
func (r *route) checkChunk(e *entry, wr *backend.WorkRequest, cut *uint64) error {
	if err := r.ended(wr); err != nil {
		return err
	}
	if st := r.table.still(e.slot); st != stAlive {
		*cut = st
		return errCutMidCopy
	}
	return nil
}

// settle turns a device-local copy's outcome into the operation's, and
// counts it.
func (r *route) settle(e *entry, wr *backend.WorkRequest, n uint64, cut uint64, err error) error {
	switch {
	case errors.Is(err, errCutMidCopy):
		return r.refused(e, wr.Op, cut)
	case err != nil:
		return err
	}
	if wr.Op == backend.OpWrite {
		r.count(1, n, 0)
	} else {
		r.count(1, 0, n)
	}
	return r.st.Err()
}

// copyDtoD copies between the caller's device memory and a peer's device
// region opened through IPC.
func (r *route) copyDtoD(e *entry, wr *backend.WorkRequest, s *memreg.DeviceSpan) error {
	n := s.Len
	if !e.access.Allows(wr.Op.Need()) {
		r.table.word(0, wRejected).Add(1)
		return fmt.Errorf("shm: %s to a %s buffer: %w", wr.Op, e.access, rdmamgr.ErrAccess)
	}
	if err := buffer.CheckRange(e.dev.n, wr.Remote.Offset, n); err != nil {
		r.table.word(0, wRejected).Add(1)
		return fmt.Errorf("shm: %s at %d+%d of a %d-byte device region: %w", wr.Op, wr.Remote.Offset, n, e.dev.n, err)
	}
	rd := e.dev.rd
	dst, src := e.dev.ptr+cuda.DevicePtr(wr.Remote.Offset), s.Ptr
	if wr.Op == backend.OpRead {
		dst, src = src, dst
	}
	if st := r.table.enter(e.slot, e.id); st != stAlive {
		return r.refused(e, wr.Op, st)
	}
	var cut uint64
	var err error
	for done := uint64(0); done < n; {
		if done > 0 {
			if err = r.checkChunk(e, wr, &cut); err != nil {
				break
			}
		}
		k := min(devDtoDChunk, n-done)
		if err = rd.d.CopyDtoD(rd.ctx, dst+cuda.DevicePtr(done), src+cuda.DevicePtr(done), k, rd.stream); err != nil {
			break
		}
		if err = rd.d.StreamSynchronize(rd.ctx, rd.stream); err != nil {
			break
		}
		done += k
	}
	r.table.leave(e.slot) // every copy queued was waited for
	return r.settle(e, wr, n, cut, err)
}

// copyDeviceHost copies between the caller's device memory and a peer's
// memfd-backed host region, through the Stager of the local device.
func (r *route) copyDeviceHost(rd *routeDev, e *entry, wr *backend.WorkRequest, s *memreg.DeviceSpan) error {
	n := s.Len
	if !e.access.Allows(wr.Op.Need()) {
		r.table.word(0, wRejected).Add(1)
		return fmt.Errorf("shm: %s to a %s buffer: %w", wr.Op, e.access, rdmamgr.ErrAccess)
	}
	if err := buffer.CheckRange(uint64(len(e.mem)), wr.Remote.Offset, n); err != nil {
		r.table.word(0, wRejected).Add(1)
		return fmt.Errorf("shm: %s at %d+%d of a %d-byte region: %w", wr.Op, wr.Remote.Offset, n, len(e.mem), err)
	}
	remote := e.mem[wr.Remote.Offset : wr.Remote.Offset+n]
	if st := r.table.enter(e.slot, e.id); st != stAlive {
		return r.refused(e, wr.Op, st)
	}
	var cut uint64
	if r.pinned(rd, e, n) {
		err := r.copyPinned(rd, e, wr, s, remote, &cut)
		r.table.leave(e.slot) // every copy queued was waited for
		return r.settle(e, wr, n, cut, err)
	}
	done := 0
	move := func(b []byte) error {
		if done > 0 {
			if err := r.checkChunk(e, wr, &cut); err != nil {
				return err
			}
		}
		if err := guardedCopy(wr.Op, b, remote[done:done+len(b)], piece); err != nil {
			return err
		}
		done += len(b)
		return nil
	}
	var err error
	if wr.Op == backend.OpWrite {
		err = rd.stager.Download(s.Ptr, n, move)
	} else {
		err = rd.stager.Upload(s.Ptr, n, move)
	}
	r.table.leave(e.slot) // the Stager returned: nothing queued runs
	return r.settle(e, wr, n, cut, err)
}

// innerDone completes the copier's inner operations on the fallback.
type innerDone chan error

func (c innerDone) Complete(_ *backend.WorkRequest, err error) { c <- err }

// stageFallback moves a device-local operation to a region on the
// fallback route through the local device's Stager, one inner operation
// per chunk.
func (r *route) stageFallback(rd *routeDev, wr *backend.WorkRequest, s *memreg.DeviceSpan) error {
	if r.fb == nil {
		return fmt.Errorf("shm: %s of %d bytes of device memory: %w", wr.Op, s.Len, ErrNotShareable)
	}
	if r.inner == nil {
		r.inner, r.innerDone = new(backend.WorkRequest), make(innerDone, 1)
	}
	in := r.inner
	var off uint64
	stop := r.stop
	move := func(b []byte) error {
		if off > 0 {
			if err := r.ended(wr); err != nil {
				return err
			}
		}
		in.Reset()
		in.Op, in.Local, in.Deadline, in.Done = wr.Op, b, wr.Deadline, r.innerDone
		var err error
		if in.Remote, err = wr.Remote.Slice(off, uint64(len(b))); err != nil {
			return err
		}
		if err := r.fb.Post(in); err != nil {
			return err
		}
		for { // the inner operation always reports; until then b is in use
			select {
			case err := <-r.innerDone:
				if err != nil {
					return err
				}
				off += uint64(len(b))
				return nil
			case <-r.poke:
				if cause := wr.CancelCause(); cause != nil && in.RequestCancel(cause) {
					r.fb.Cancel(in)
				}
			case <-stop: // Close waits for the copier: end the inner one
				stop = nil
				if in.RequestCancel(errRouteClosed) {
					r.fb.Cancel(in)
				}
			}
		}
	}
	if wr.Op == backend.OpWrite {
		return rd.stager.Download(s.Ptr, s.Len, move)
	}
	return rd.stager.Upload(s.Ptr, s.Len, move)
}
