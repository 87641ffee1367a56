//go:build linux

package shm

import (
	"fmt"
	"runtime/debug"
	"sync"
	"unsafe"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

var _ backend.ListPoster = (*route)(nil)

// A run of a list is copied under one entry reference and one state-table
// enter and leave; it is bounded so a cut (Revoke, Release) waits for no
// more than this much copying.
const (
	runMax      = 64
	runMaxBytes = piece
)

// PostList implements backend.ListPoster: consecutive small Puts and Gets
// on one mapped region (a run) are copied in the caller's goroutine under
// one entry reference and one enter and leave of the state table, then
// completed in order; anything else is posted as Post posts it.
func (r *route) PostList(wrs []*backend.WorkRequest) (int, error) {
	for i := 0; i < len(wrs); {
		wr := wrs[i]
		if _, ok := deviceLocal(wr); ok {
			if err := r.Post(wr); err != nil {
				return i, err
			}
			i++
			continue
		}
		if err := r.postable(wr); err != nil {
			return i, err
		}
		if wr.Op == backend.OpSend || !r.inline(wr) {
			if err := r.Post(wr); err != nil {
				return i, err
			}
			i++
			continue
		}
		e := r.cache.get(wr.Remote.Region, wr.Remote.Key)
		if e == nil || e.fallback || e.dev != nil {
			if e != nil {
				r.cache.unref(e)
			}
			if err := r.Post(wr); err != nil {
				return i, err
			}
			i++
			continue
		}
		// The run: the requests after wr that postable would pass, inline
		// on e's region, written out here (no call per request). The
		// route's failure is checked once, for wr: copyRun checks it again
		// after the copies.
		j, bytes, inlineMax := i+1, len(wr.Local), r.b.cfg.InlineMax
		for j < len(wrs) && j-i < runMax {
			w := wrs[j]
			n := len(w.Local)
			if (w.Op != backend.OpWrite && w.Op != backend.OpRead) || n == 0 || n > inlineMax || uint64(n) != w.Remote.Length ||
				w.Remote.Offset+uint64(n) < w.Remote.Offset || w.Remote.Region != e.id || w.Remote.Key != e.key ||
				bytes+n > runMaxBytes || w.CancelCause() != nil {
				break // not the run's: posted on its own, refused by postable if it must be
			}
			bytes += n
			j++
		}
		r.copyRun(e, wrs[i:j])
		r.cache.unref(e)
		i = j
	}
	return len(wrs), nil
}

// runErrs holds copyRun's outcomes of a run.
var runErrs = sync.Pool{New: func() any { return new([runMax]error) }}

// postable is Post's check of wr before it is posted.
func (r *route) postable(wr *backend.WorkRequest) error {
	if n := uint64(len(wr.Local)); (wr.Op != backend.OpWrite && wr.Op != backend.OpRead) ||
		n == 0 || n != wr.Remote.Length || wr.Remote.Offset+n < wr.Remote.Offset { // not ValidateAll's common case: let it say why
		if err := routestate.ValidateAll("shm", wr); err != nil {
			return err
		}
	}
	if err := r.st.Err(); err != nil {
		return err
	}
	if cause := wr.CancelCause(); cause != nil {
		return routestate.OpError("shm", wr, cause)
	}
	return nil
}

// copyRun copies run (inline Puts and Gets on e's region, each checked by
// postable) under one enter and leave, then reports each.
func (r *route) copyRun(e *entry, run []*backend.WorkRequest) {
	if len(run) == 1 {
		r.reportInline(run[0], r.copy(e, run[0], false))
		return
	}
	ep := runErrs.Get().(*[runMax]error) // a queue pair's CompleteRun keeps it from the stack
	defer runErrs.Put(ep)
	errs := ep[:len(run)]
	clear(errs) // runOps sets only the failures
	var ops [runMax]qpbind.InlineOp
	for i, wr := range run {
		o := &ops[i] // field by field: see queuepair's PostOps
		o.Local, o.Offset, o.Op = wr.Local, wr.Remote.Offset, wr.Op
	}
	r.runOps(e, ops[:len(run)], errs)
	if rc, isRun := run[0].Done.(qpbind.RunCompleter); isRun { // a queue pair's: one report of the run
		rc.CompleteRun(run, errs)
		return
	}
	for i, wr := range run {
		wr.Done.Complete(wr, errs[i])
	}
}

// runOps copies ops (on e's region, at most runMaxBytes in all) under one
// enter and leave of the state table, setting errs[i] (nil on entry) to
// why ops[i] failed, counts them in the route's counters and returns how
// many failed.
func (r *route) runOps(e *entry, ops []qpbind.InlineOp, errs []error) int {
	var in, out, made uint64
	if st := r.table.enter(e.slot, e.id); st != stAlive {
		for i := range ops { // as copy refuses one: its own checks first
			if _, errs[i] = r.place(e, ops[i].Op, ops[i].Local, ops[i].Offset); errs[i] == nil {
				errs[i] = r.refused(e, ops[i].Op, st)
			}
		}
	} else {
		in, out, made = r.copies(e, ops, errs)
		r.table.leave(e.slot)
		if err := r.st.Err(); err != nil { // the owner went away meanwhile
			for i := range ops {
				if errs[i] == nil {
					errs[i] = err
				}
			}
			made = 0
		}
	}
	// Every operation copies or fails: the ones made are the ones that
	// succeeded (a refused one sets its error and is not made).
	r.st.CountMany(made, in, out, uint64(len(ops))-made)
	return len(ops) - int(made)
}

// copies makes the copies of a run that entered the state table (each
// at most runMaxBytes, so on the cached path), setting errs[i] for each
// that fails, and adds the ones made (the third result) to the served
// counters. A fault (guardedCopy) fails the copy it hit and those after
// it; the ones before it were made, and are counted.
func (r *route) copies(e *entry, run []qpbind.InlineOp, errs []error) (in, out, made uint64) {
	done := 0 // run[:done] copied or refused: copyOps moves it on
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			in, out, made = 0, 0, 0
			for i, wr := range run {
				switch {
				case i >= done:
					errs[i] = fmt.Errorf("%w (%v)", errCopyFault, p)
				case errs[i] == nil: // made before the fault
					made++
					if wr.Op == backend.OpRead {
						out += uint64(len(wr.Local))
					} else {
						in += uint64(len(wr.Local))
					}
				}
			}
		}
		r.count(made, in, out)
	}()
	in, out, made = r.copyOps(e, run, errs, &done)
	return in, out, made
}

// copyOps is copies' loop. Runs of 8-byte operations go through
// copyWords, which calls nothing, so its loop keeps its values in
// registers; any other operation is copied (or refused) here. *done is
// how many of run are behind it (a fault finds the one it hit there).
func (r *route) copyOps(e *entry, run []qpbind.InlineOp, errs []error, done *int) (in, out, made uint64) {
	mem := e.mem
	size := uint64(len(mem))
	canPut, canGet := e.access.Allows(backend.OpWrite.Need()), e.access.Allows(backend.OpRead.Need())
	errs = errs[:len(run)]
	for i := 0; i < len(run); i++ {
		k, kin, kout := copyWords(mem, run, i, canPut, canGet, done)
		in, out, made = in+kin, out+kout, made+uint64(k)
		if i += k; i == len(run) {
			break
		}
		wr := &run[i]
		n, off, get := uint64(len(wr.Local)), wr.Offset, wr.Op == backend.OpRead
		if off > size || n > size-off || (get && !canGet) || (!get && (!canPut || wr.Op != backend.OpWrite)) {
			_, errs[i] = r.place(e, wr.Op, wr.Local, wr.Offset) // its refusal
			if errs[i] == nil {
				errs[i] = fmt.Errorf("shm: %s in a run: %w", wr.Op, rdmamgr.ErrInvalid) // not a Put or Get: the caller's contract
			}
			*done = i + 1
			continue
		}
		remote := mem[off : off+n : off+n] // place's checks, passed, without its call
		if get {
			copy(wr.Local, remote)
			out += n
		} else {
			copy(remote, wr.Local)
			in += n
		}
		made++
		*done = i + 1
	}
	return in, out, made
}

// copyWords copies the 8-byte Puts and Gets of run from run[start] on
// that place would pass, one word each, and returns how many it copied
// (advancing *done past each): it stops at the first other operation
// (another size, a refusal), for copyOps to take.
func copyWords(mem []byte, run []qpbind.InlineOp, start int, canPut, canGet bool, done *int) (k int, in, out uint64) {
	if len(mem) < 8 {
		return 0, 0, 0
	}
	last := uint64(len(mem) - 8) // the last offset a word fits at
	base := unsafe.Pointer(unsafe.SliceData(mem))
	i := start
	for ; i < len(run); i++ { // one exit: the compiler keeps i, in and out in registers
		wr := &run[i]
		off := wr.Offset
		if len(wr.Local) != 8 || off > last {
			break
		}
		// mem[off:off+8], checked just above: the slice expression's
		// own check and mask cost a third of the loop.
		local, remote := (*[8]byte)(wr.Local), (*[8]byte)(unsafe.Add(base, off))
		if wr.Op == backend.OpWrite && canPut {
			*remote = *local
			in += 8
		} else if wr.Op == backend.OpRead && canGet {
			*local = *remote
			out += 8
		} else {
			break
		}
		*done = i + 1
	}
	return i - start, in, out
}
