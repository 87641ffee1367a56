//go:build linux

package shm

import (
	"github.com/rdmamgr/rdmamgr/backend"
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
// route ended, an operation that is not an inline Put or Get) is declined
// whole, untouched.
func (r *route) RunInline(region uint64, key buffer.Key, ops []qpbind.InlineOp, errs []error) bool {
	if len(ops) == 0 || len(ops) > runMax || len(errs) != len(ops) || r.st.Err() != nil {
		return false
	}
	limit := r.InlineMax()
	for i := range ops {
		if n := len(ops[i].Local); n == 0 || n > limit || (ops[i].Op != backend.OpWrite && ops[i].Op != backend.OpRead) {
			return false
		}
	}
	e := r.cache.get(region, key)
	if e == nil || e.fallback || e.dev != nil {
		if e != nil {
			r.cache.unref(e)
		}
		return false
	}
	for i := 0; i < len(ops); {
		j, bytes := i+1, len(ops[i].Local)
		for j < len(ops) && bytes+len(ops[j].Local) <= runMaxBytes {
			bytes += len(ops[j].Local)
			j++
		}
		r.runOps(e, ops[i:j], errs[i:j])
		i = j
	}
	r.cache.unref(e)
	return true
}
