package queuepair

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// TestInlineRunsRounds: a chain of 150 small operations (runs split at 64, at a local
// region switch, with unsignaled ones and failures) posted for several
// rounds through takeRoute (which panics if errs is not nil on entry):
// each operation is reported exactly once with its own outcome (no stale
// error from an earlier round), successful unsignaled ones only through
// their WorkRequest, and every local reference is dropped.
func TestInlineRunsRounds(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	defer e.qp.Release()
	r := &takeRoute{seeRoute: seeRoute{nullRoute: nullRoute{fakeRoute: *newFakeRoute()}}}
	qp := newQueuePair(9, peerID, r, e.local, qpbind.Options{})
	const n = 150
	cq := NewCompletionQueue(n + 7) // odd size: the ring wraps across rounds
	qp.SetCompletionQueue(cq)
	locA := alloc(t, e.local, 8*n, buffer.AccessReadWrite)
	locB := alloc(t, e.local, 8*n, buffer.AccessReadWrite)
	rem := alloc(t, e.remote, 8*n, buffer.AccessReadWrite)
	sl := func(b buffer.Buffer, off uint64) buffer.Buffer {
		s, err := b.Slice(off, 8)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ops := make([]Op, n)
	wrs := make([]*WorkRequest, n)
	for i := range ops {
		local := locA
		if i >= 100 {
			local = locB
		}
		ops[i] = PutOp(sl(local, 8*uint64(i)), sl(rem, 8*uint64(i)))
		if i%3 == 0 {
			ops[i] = GetOp(sl(local, 8*uint64(i)), sl(rem, 8*uint64(i)))
		}
		ops[i].ID = uint64(i + 1)
		ops[i].Unsignaled = i%5 == 4 && i != n-1
		wrs[i] = new(WorkRequest)
	}
	out := make([]*WorkRequest, 2*n)
	rounds := []map[uint64]error{
		nil, // first use: prepare
		{8 * 10: errors.New("f10"), 8 * 14: errors.New("f14u"), 8 * 70: errors.New("f70"), 8 * 120: errors.New("f120"), 8 * 64: errors.New("f64")},
		nil, // every one succeeds: no stale outcome
		{8 * 63: errors.New("f63"), 8 * 149: errors.New("f149"), 8 * 99: errors.New("f99u")},
		nil,
	}
	for round, fail := range rounds {
		r.failAt = fail
		r.offered, r.seen, r.done = nil, nil, nil
		qp.PostOps(context.Background(), wrs, ops)
		got := map[*WorkRequest]int{}
		k := 0
		for {
			m := cq.Poll(out[k:])
			if m == 0 {
				break
			}
			k += m
		}
		for _, w := range out[:k] {
			got[w]++
		}
		clear(out)
		want := 0
		for i, w := range wrs {
			werr := fail[8*uint64(i)]
			if err := w.Err(); err != werr {
				t.Fatalf("round %d op %d: Err %v, want %v", round, i, err, werr)
			}
			if w.ID() != uint64(i+1) {
				t.Fatalf("round %d op %d: ID %d", round, i, w.ID())
			}
			inCQ := !ops[i].Unsignaled || werr != nil
			if inCQ {
				want++
				if got[w] != 1 {
					t.Fatalf("round %d op %d (unsig %v, err %v): reaped %d times, want once", round, i, ops[i].Unsignaled, werr, got[w])
				}
			} else if got[w] != 0 {
				t.Fatalf("round %d op %d: a successful unsignaled one reaped %d times", round, i, got[w])
			}
		}
		if k != want {
			t.Fatalf("round %d: reaped %d, want %d", round, k, want)
		}
		inline := 0
		for _, c := range r.offered {
			inline += len(c.ops)
		}
		if round > 0 && inline < n-3 {
			t.Fatalf("round %d: only %d of %d operations ran inline (%d runs)", round, inline, n, len(r.offered))
		}
		t.Logf("round %d: %d runs, %d inline, %d requests", round, len(r.offered), inline, len(r.seen))
	}
	if cq.held.Load() != 0 || cq.fast.Load() != 0 {
		t.Fatalf("queue slots left held: %d (fast %d)", cq.held.Load(), cq.fast.Load())
	}
	qp.Release()
	for _, b := range []buffer.Buffer{locA, locB} {
		if !drained(t, e.local, b) {
			t.Fatalf("local region %d still holds references", b.Region)
		}
	}
}

// TestCQRingModel: pushAll and take against a model FIFO, on rings of several
// sizes, with every head position, wrap and a full ring.
func TestCQRingModel(t *testing.T) {
	pool := make([]*WorkRequest, 64)
	for i := range pool {
		pool[i] = new(WorkRequest)
	}
	for size := 1; size <= 7; size++ {
		cq := NewCompletionQueue(size)
		var model []*WorkRequest
		next := 0
		out := make([]*WorkRequest, size+2)
		for step := 0; step < 400; step++ {
			free := size - len(model)
			// push between 0 and free, take between 0 and len(out)
			p := (step * 7 % (free + 1))
			ws := make([]*WorkRequest, p)
			for j := range ws {
				ws[j] = pool[next%len(pool)]
				next++
			}
			cq.pushAll(ws)
			model = append(model, ws...)
			if cq.n != len(model) {
				t.Fatalf("size %d step %d: n %d, model %d", size, step, cq.n, len(model))
			}
			m := step * 5 % (len(out) + 1)
			cq.held.Add(int64(min(m, len(model)))) // take gives back a slot each
			k := cq.take(out[:m])
			if k != min(m, len(model)) {
				t.Fatalf("size %d step %d: took %d, want %d", size, step, k, min(m, len(model)))
			}
			for j := range k {
				if out[j] != model[j] {
					t.Fatalf("size %d step %d: out[%d] wrong", size, step, j)
				}
			}
			model = model[k:]
			// the ring holds exactly the model's requests, nil elsewhere
			live := 0
			for _, w := range cq.ring {
				if w != nil {
					live++
				}
			}
			if live != len(model) {
				t.Fatalf("size %d step %d: %d non-nil ring entries, %d queued", size, step, live, len(model))
			}
		}
	}
}
