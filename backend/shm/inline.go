//go:build linux

package shm

import (
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

var _ qpbind.InlineRunner = (*route)(nil)

// InlineMax implements qpbind.InlineRunner: an operation of a run is
// copied on the cached path in one piece.
func (r *route) InlineMax() int { return min(r.b.cfg.InlineMax, runMaxBytes) }

// RunInline implements qpbind.InlineRunner: the run is copied as
// PostList copies a run of requests (runOps: one enter and leave of the
// state table for each runMaxBytes of it), on the entry of a region
// mapped already; anything else (first use, fallback, device memory, the
// route ended) is declined whole, untouched. The operations are the
// caller's to bound (InlineMax, a Put or a Get: qpbind's contract), so
// they are not checked twice: one that breaks it is still copied within
// the region's bounds or refused alone (copyOps), only not as cheaply.
func (r *route) RunInline(region uint64, key buffer.Key, ops []qpbind.InlineOp, errs []error) (failed int, ok bool) {
	if len(ops) == 0 || len(ops) > runMax || len(errs) != len(ops) || r.st.Err() != nil {
		return 0, false
	}
	bytes := 0
	for i := range ops {
		bytes += len(ops[i].Local)
	}
	e := r.cache.get(region, key)
	if e == nil || e.fallback || e.dev != nil {
		if e != nil {
			r.cache.unref(e)
		}
		return 0, false
	}
	if bytes <= runMaxBytes { // the common case: one piece
		failed = r.runOps(e, ops, errs)
		r.cache.unref(e)
		return failed, true
	}
	for i := 0; i < len(ops); {
		j, bytes := i+1, len(ops[i].Local)
		for j < len(ops) && bytes+len(ops[j].Local) <= runMaxBytes {
			bytes += len(ops[j].Local)
			j++
		}
		failed += r.runOps(e, ops[i:j], errs[i:j])
		i = j
	}
	r.cache.unref(e)
	return failed, true
}
