//go:build linux

package shm

import (
	"fmt"
	"runtime/debug"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// chunk is how much a queued copy moves between its checks of
// cancellation, deadline and the region's state.
const chunk = 1 << 20

// Go's copy switches to non-temporal stores from 1 MiB on (memmove_amd64):
// right for copies larger than the caches, about 0.6× a cached copy for
// one that fits. Copies of up to cachedMax bytes are therefore made in
// pieces of piece bytes, which stay on the cached path; larger ones go
// chunk by chunk, each bypassing the cache.
const (
	piece     = 256 << 10
	cachedMax = 4 << 20
)

// copy moves wr's bytes between its local memory and e's mapping. The
// region's access and bounds are checked here, its state (revoked,
// released, lease) in the table around the copy; chunked copies check
// again between chunks.
func (r *route) copy(e *entry, wr *backend.WorkRequest, chunked bool) error {
	remote, err := r.place(e, wr.Op, wr.Local, wr.Remote.Offset)
	if err != nil {
		return err
	}
	n := uint64(len(remote))
	if st := r.table.enter(e.slot, e.id); st != stAlive {
		return r.refused(e, wr.Op, st)
	}
	if n <= cachedMax {
		err = guardedCopy(wr.Op, wr.Local, remote, piece)
	} else if !chunked {
		err = guardedCopy(wr.Op, wr.Local, remote, len(remote))
	} else {
		err = r.copyChunks(e, wr, remote)
	}
	r.table.leave(e.slot)
	if err != nil {
		return err
	}
	if wr.Op != backend.OpRead {
		r.count(1, n, 0)
	} else {
		r.count(1, 0, n)
	}
	if err := r.st.Err(); err != nil { // the owner went away meanwhile
		return err
	}
	return nil
}

// place checks the access and bounds of an op of len(local) bytes at off
// in e's region and returns the bytes of e's mapping it copies to or
// from.
func (r *route) place(e *entry, op backend.Op, local []byte, off uint64) ([]byte, error) {
	n := uint64(len(local))
	if !e.access.Allows(op.Need()) {
		r.table.word(0, wRejected).Add(1)
		return nil, fmt.Errorf("shm: %s to a %s buffer: %w", op, e.access, rdmamgr.ErrAccess)
	}
	if err := buffer.CheckRange(uint64(len(e.mem)), off, n); err != nil {
		r.table.word(0, wRejected).Add(1)
		return nil, fmt.Errorf("shm: %s at %d+%d of a %d-byte region: %w", op, off, n, len(e.mem), err)
	}
	return e.mem[off : off+n], nil
}

// count adds copies done to the served counters in the state table.
func (r *route) count(ops, in, out uint64) {
	if ops == 0 {
		return
	}
	r.table.word(0, wOps).Add(ops)
	if in != 0 {
		r.table.word(0, wBytesIn).Add(in)
	}
	if out != 0 {
		r.table.word(0, wBytesOut).Add(out)
	}
}

// copyChunks copies chunk by chunk, ending early when wr is cancelled or
// its deadline passes, or the region is cut.
func (r *route) copyChunks(e *entry, wr *backend.WorkRequest, remote []byte) error {
	for off := 0; off < len(remote); off += chunk {
		if off > 0 {
			if err := r.ended(wr); err != nil {
				return err
			}
			if st := r.table.still(e.slot); st != stAlive {
				return r.refused(e, wr.Op, st)
			}
		}
		end := min(off+chunk, len(remote))
		if err := guardedCopy(wr.Op, wr.Local[off:end], remote[off:end], chunk); err != nil {
			return err
		}
	}
	return nil
}

// refused is the error of a copy the region's state refused: the route's
// own end when it is ending (its owner cuts every region as the
// connection closes), else the state's.
func (r *route) refused(e *entry, op backend.Op, st uint64) error {
	if err := r.st.Err(); err != nil {
		return err
	}
	r.table.word(0, wRejected).Add(1)
	r.forgetEntry(e)
	return &backend.RemoteError{Code: backend.Code(stateErr(st)), Op: op}
}

// forgetEntry drops an entry whose region was cut and tells the owner.
func (r *route) forgetEntry(e *entry) {
	if r.cache.drop(e) {
		r.tellEvicted([]*entry{e})
	}
}

// guardedCopy copies between local and the shared mapping, in pieces of
// at most step bytes. The mapping cannot fault by design (the memfd is
// sealed against shrinking and we hold it mapped), but should it, the
// fault becomes an error instead of a crash (debug.SetPanicOnFault).
func guardedCopy(op backend.Op, local, remote []byte, step int) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			err = fmt.Errorf("%w (%v)", errCopyFault, p)
		}
	}()
	dst, src := local, remote
	if op != backend.OpRead {
		dst, src = remote, local
	}
	for len(src) > step {
		copy(dst[:step], src[:step])
		dst, src = dst[step:], src[step:]
	}
	copy(dst, src)
	return nil
}
