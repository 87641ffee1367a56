package actor

import (
	"errors"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/word"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// CompareAndSwap and FetchAdd through a queue pair against the owner's
// memory, and the queue pair's checks.

func TestAtomicsEndToEnd(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), 64, buffer.AccessReadWrite|buffer.AccessAtomic)
	w, err := word.At(mustBytes(t, b, remote), 8)
	if err != nil {
		t.Fatal(err)
	}
	target := slice(t, remote, 8, 8)
	qp := requestQP(t, ctx, a, b.PID())
	w.Store(100)
	if op := qp.FetchAdd(ctx, target, 5); op.Wait(ctx) != nil || op.Value() != 100 || w.Load() != 105 {
		t.Fatalf("fetch-add: %v, old %d, word %d", op.Err(), op.Value(), w.Load())
	}
	if op := qp.CompareAndSwap(ctx, target, 105, 1); op.Wait(ctx) != nil || op.Value() != 105 || w.Load() != 1 {
		t.Fatalf("compare-swap: %v, old %d, word %d", op.Err(), op.Value(), w.Load())
	}
	if op := qp.CompareAndSwap(ctx, target, 105, 2); op.Wait(ctx) != nil || op.Value() != 1 || w.Load() != 1 {
		t.Fatalf("compare-swap with a stale compare: %v, old %d, word %d", op.Err(), op.Value(), w.Load())
	}

	// A word at an odd address is refused by the owner.
	raw := make([]byte, 72)
	odd, err := b.Client().RequestBuffer(ctx, 64, buffer.AccessReadWrite|buffer.AccessAtomic, WithMemory(raw[1:65]))
	if err != nil {
		t.Fatal(err)
	}
	if op := qp.FetchAdd(ctx, slice(t, odd, 8, 8), 1); !errors.Is(op.Wait(ctx), rdmamgr.ErrMisaligned) || op.Value() != 0 {
		t.Fatalf("fetch-add at an odd address: %v", op.Err())
	}
}

// Posters on one queue pair and the owner's sync/atomic on the same word
// agree: the sum is exact, every old value a poster got is distinct.
func TestFetchAddAgreesWithOwner(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), 64, buffer.AccessReadWrite|buffer.AccessAtomic)
	w, err := word.At(mustBytes(t, b, remote), 8)
	if err != nil {
		t.Fatal(err)
	}
	w.Store(1)
	target := slice(t, remote, 8, 8)
	qp := requestQP(t, ctx, a, b.PID())
	const posters, each, owner = 4, 250, 1000
	olds := make(chan uint64, posters*each)
	var wg sync.WaitGroup
	for range posters {
		wg.Go(func() {
			ops := make([]*queuepair.WorkRequest, each)
			for i := range ops {
				ops[i] = qp.FetchAdd(ctx, target, 1)
			}
			for _, op := range ops {
				if err := op.Wait(ctx); err != nil {
					t.Error(err)
					return
				}
				olds <- op.Value()
			}
		})
	}
	wg.Go(func() {
		for range owner {
			w.Add(1)
		}
	})
	wg.Wait()
	close(olds)
	if got := w.Load(); got != 1+posters*each+owner {
		t.Fatalf("counter %d, want %d", got, 1+posters*each+owner)
	}
	seen := map[uint64]bool{}
	for o := range olds {
		if seen[o] {
			t.Fatalf("old value %d twice", o)
		}
		seen[o] = true
	}
}

// The queue pair refuses a misaligned word, a missing right or another
// manager's buffer before anything is posted: the route and the owner
// see nothing.
func TestVerbChecksBeforePost(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	rb := NewClient(sys, b.PID())
	all := requestBuf(t, ctx, rb, 64, buffer.AccessReadWrite|buffer.AccessAtomic|buffer.AccessNotify)
	rw := requestBuf(t, ctx, rb, 64, buffer.AccessReadWrite)
	local := requestBuf(t, ctx, a.Client(), 64, buffer.AccessReadWrite|buffer.AccessAtomic)
	qp := requestQP(t, ctx, a, b.PID())
	served := b.Served()
	cases := []struct {
		name string
		op   *queuepair.WorkRequest
		want error
	}{
		{"fetch-add at offset 4", qp.FetchAdd(ctx, slice(t, all, 4, 8), 1), rdmamgr.ErrMisaligned},
		{"fetch-add on 16 bytes", qp.FetchAdd(ctx, slice(t, all, 0, 16), 1), rdmamgr.ErrMisaligned},
		{"compare-swap on 4 bytes", qp.CompareAndSwap(ctx, slice(t, all, 8, 4), 0, 1), rdmamgr.ErrMisaligned},
		{"compare-swap without the right", qp.CompareAndSwap(ctx, slice(t, rw, 8, 8), 0, 1), rdmamgr.ErrAccess},
		{"put-imm without notify", qp.PutWithImm(ctx, local, rw, 1), rdmamgr.ErrAccess},
		{"fetch-add on our own buffer", qp.FetchAdd(ctx, slice(t, local, 8, 8), 1), rdmamgr.ErrWrongPeer},
		{"send of nothing", qp.Send(ctx, buffer.Buffer{}), rdmamgr.ErrInvalid},
		{"send of a peer's buffer", qp.Send(ctx, all), rdmamgr.ErrNotLocal},
	}
	for _, tc := range cases {
		if err := tc.op.Wait(ctx); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if tc.op.Value() != 0 {
			t.Errorf("%s: value %d of a refused operation", tc.name, tc.op.Value())
		}
	}
	if got := b.Served(); got.Ops != served.Ops || got.Rejected != served.Rejected {
		t.Fatalf("the owner served %+v, before %+v", got, served)
	}
	if rs := routes(t, ctx, a); len(rs) != 1 || rs[0].Ops != 0 || rs[0].Errors != 0 {
		t.Fatalf("routes %v", rs)
	}
}
