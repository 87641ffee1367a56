package queuepair

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// verbRoute completes what is posted at once and records its operands;
// an atomic's old value is 41.
type verbRoute struct{ last backend.WorkRequest }

func (r *verbRoute) Post(wr *backend.WorkRequest) error {
	r.last.Op, r.last.Imm, r.last.HasImm, r.last.Compare, r.last.Swap = wr.Op, wr.Imm, wr.HasImm, wr.Compare, wr.Swap
	r.last.Local, r.last.Remote = wr.Local, wr.Remote
	if wr.Op.Atomic() {
		wr.Result = 41
	}
	wr.Done.Complete(wr, nil)
	return nil
}
func (r *verbRoute) Done() <-chan struct{}       { return nil }
func (r *verbRoute) Err() error                  { return nil }
func (r *verbRoute) Stats() backend.RouteStats   { return backend.RouteStats{} }
func (r *verbRoute) Cancel(*backend.WorkRequest) {}
func (r *verbRoute) Close() error                { return nil }

// The reusable Post variants carry their operands, reuse one WorkRequest
// and allocate nothing; the queue pair's checks run before anything is
// posted.
func TestPostVerbs(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	rt := &verbRoute{}
	qp := newQueuePair(1, peerID, rt, e.local, qpbind.Options{})
	defer qp.Release()
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite|buffer.AccessAtomic|buffer.AccessNotify)
	word, _ := remote.Slice(8, 8)
	ctx := context.Background()
	var w WorkRequest
	check := func(what string, op backend.Op) {
		t.Helper()
		if err := w.Wait(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if rt.last.Op != op {
			t.Fatalf("%s posted %s", what, rt.last.Op)
		}
	}
	qp.PostPutWithImm(ctx, &w, local, remote, 9)
	check("put with imm", backend.OpWriteImm)
	if rt.last.Imm != 9 || len(rt.last.Local) != 64 {
		t.Fatalf("put with imm: imm %d, %d local bytes", rt.last.Imm, len(rt.last.Local))
	}
	qp.PostSend(ctx, &w, local, 3, true)
	check("send", backend.OpSend)
	if rt.last.Imm != 3 || !rt.last.HasImm || rt.last.Remote.Length != 0 {
		t.Fatalf("send: imm %d has %v remote %v", rt.last.Imm, rt.last.HasImm, rt.last.Remote)
	}
	qp.PostCompareAndSwap(ctx, &w, word, 1, 2)
	check("compare-swap", backend.OpCompareSwap)
	if rt.last.Compare != 1 || rt.last.Swap != 2 || w.Value() != 41 || rt.last.Local != nil {
		t.Fatalf("compare-swap: compare %d swap %d, value %d", rt.last.Compare, rt.last.Swap, w.Value())
	}
	qp.PostFetchAdd(ctx, &w, word, 5)
	check("fetch-add", backend.OpFetchAdd)
	if rt.last.Swap != 5 || w.Value() != 41 {
		t.Fatalf("fetch-add: add %d, value %d", rt.last.Swap, w.Value())
	}
	misaligned, _ := remote.Slice(4, 8)
	qp.PostFetchAdd(ctx, &w, misaligned, 1)
	if err := w.Wait(ctx); !errors.Is(err, rdmamgr.ErrMisaligned) || rt.last.Op != backend.OpFetchAdd || rt.last.Swap != 5 {
		t.Fatalf("misaligned fetch-add: %v (last posted %s add %d)", err, rt.last.Op, rt.last.Swap)
	}
	noAtomic := alloc(t, e.remote, 8, buffer.AccessReadWrite)
	qp.PostCompareAndSwap(ctx, &w, noAtomic, 0, 1)
	if err := w.Wait(ctx); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("compare-swap on a buffer without AccessAtomic: %v", err)
	}
	if testing.Short() || raceEnabled {
		return
	}
	if a := testing.AllocsPerRun(200, func() {
		qp.PostFetchAdd(ctx, &w, word, 1)
		_ = w.Wait(ctx)
		qp.PostPutWithImm(ctx, &w, local, remote, 1)
		_ = w.Wait(ctx)
	}); a != 0 {
		t.Fatalf("%.2f allocations per fetch-add + put-with-imm, want 0", a)
	}
}
