package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/word"
)

// CompareAndSwap and FetchAdd on 8-byte aligned words of buffers granted
// AccessAtomic: they return the old value, agree with the owner's own
// sync/atomic on the same word, and refuse misaligned words and buffers
// without the right.

const accessAtomic = buffer.AccessReadWrite | buffer.AccessAtomic

// ownerWord returns the owner's view of the word at off of mem.
func ownerWord(t testing.TB, mem []byte, off int) *atomic.Uint64 {
	t.Helper()
	w, err := word.At(mem, uint64(off))
	if err != nil {
		t.Fatalf("word at %d: %v", off, err)
	}
	return w
}

func testCompareAndSwap(t *testing.T, f Factory) {
	p := NewVerbsPair(t, f, 1, 1)
	p.Need(t, backend.OpCompareSwap)
	hb, lb := Alloc(t, p.RegB, 64, accessAtomic)
	Random(t, lb)
	w := ownerWord(t, lb, 16)
	const x, y, z = 0x0123456789ABCDEF, 0xFEDCBA9876543210, 42
	w.Store(x)
	before := bytes.Clone(lb)
	target := Slice(t, hb, 16, 8)
	if old, err := p.atomic(t, p.Route, backend.OpCompareSwap, target, x, y); err != nil || old != x || w.Load() != y {
		t.Fatalf("CAS %#x->%#x: old %#x, %v; word %#x", uint64(x), uint64(y), old, err, w.Load())
	}
	if old, err := p.atomic(t, p.Route, backend.OpCompareSwap, target, x, z); err != nil || old != y || w.Load() != y {
		t.Fatalf("CAS with a stale compare: old %#x, %v; word %#x (want unchanged %#x)", old, err, w.Load(), uint64(y))
	}
	if old, err := p.atomic(t, p.Route, backend.OpFetchAdd, target, 0, 1); err != nil || old != y || w.Load() != y+1 {
		t.Fatalf("FetchAdd 1: old %#x, %v; word %#x", old, err, w.Load())
	}
	AssertSame(t, "bytes before the word", lb[:16], before[:16])
	AssertSame(t, "bytes after the word", lb[24:], before[24:])
}

// testFetchAddConcurrent: routes × ops FetchAdd of 1 from as many
// posters, many in flight each, while the owner adds on the same word
// with sync/atomic: the sum is exact and every old value a peer got is
// distinct.
func testFetchAddConcurrent(t *testing.T, f Factory) {
	const routes, ops, ownerAdds = 4, 500, 2000
	p := NewVerbsPair(t, f, 1, 1)
	p.Need(t, backend.OpFetchAdd)
	hb, lb := Alloc(t, p.RegB, 4096, accessAtomic)
	w := ownerWord(t, lb, 8)
	const start = 1 << 40
	w.Store(start)
	target := Slice(t, hb, 8, 8)
	rts := []backend.Route{p.Route}
	for len(rts) < routes {
		rts = append(rts, p.NewRoute(t))
	}
	olds := make(chan uint64, routes*ops)
	errs := make(chan error, routes+1)
	var wg sync.WaitGroup
	for _, rt := range rts {
		wg.Go(func() { errs <- fetchAdds(rt, target, ops, f.Timeout, olds) })
	}
	wg.Go(func() {
		for range ownerAdds {
			w.Add(1)
		}
		errs <- nil
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, want := w.Load(), uint64(start+routes*ops+ownerAdds); got != want {
		t.Fatalf("counter %d, want %d (lost %d)", got, want, int64(want-got))
	}
	close(olds)
	seen := make(map[uint64]bool, routes*ops)
	for o := range olds {
		if seen[o] || o < start {
			t.Fatalf("old value %d twice or below the start", o)
		}
		seen[o] = true
	}
}

// fetchAdds posts n FetchAdd of 1 on rt at once, waits for them and
// sends their old values to olds.
func fetchAdds(rt backend.Route, target buffer.Buffer, n int, timeout time.Duration, olds chan<- uint64) error {
	rec := NewRecorder(n)
	deadline := time.Now().Add(timeout)
	for range n {
		wr := &backend.WorkRequest{Op: backend.OpFetchAdd, Remote: target, Swap: 1, Deadline: deadline, Done: rec}
		if err := rt.Post(wr); err != nil {
			return fmt.Errorf("post fetch-add: %w", err)
		}
	}
	for range n {
		select {
		case res := <-rec.Results():
			if res.Err != nil {
				return fmt.Errorf("fetch-add: %w", res.Err)
			}
			olds <- res.WR.Result
		case <-time.After(timeout):
			return errors.New("fetch-add not completed")
		}
	}
	return nil
}

// testAtomicMisaligned: a word that is not one 8-byte aligned word of its
// buffer is refused at Post; one at an aligned offset of a region whose
// memory is not 8-byte aligned is refused by the owner. Nothing changes.
func testAtomicMisaligned(t *testing.T, f Factory) {
	p := NewVerbsPair(t, f, 1, 1)
	p.Need(t, backend.OpCompareSwap, backend.OpFetchAdd)
	hb, lb := Alloc(t, p.RegB, 64, accessAtomic)
	Random(t, lb)
	before := bytes.Clone(lb)
	rec := NewRecorder(1)
	for _, target := range []buffer.Buffer{Slice(t, hb, 4, 8), Slice(t, hb, 8, 4), Slice(t, hb, 8, 16), Slice(t, hb, 1, 8)} {
		for _, op := range []backend.Op{backend.OpCompareSwap, backend.OpFetchAdd} {
			wr := &backend.WorkRequest{Op: op, Remote: target, Swap: 1, Deadline: time.Now().Add(f.Timeout), Done: rec}
			if err := p.Route.Post(wr); !errors.Is(err, rdmamgr.ErrMisaligned) {
				t.Fatalf("%s on [%d,+%d): Post = %v, want ErrMisaligned", op, target.Offset, target.Length, err)
			}
		}
	}
	time.Sleep(10 * time.Millisecond)
	rec.None(t)
	AssertSame(t, "buffer after refused atomics", lb, before)
	CheckRoute(t, f.Timeout, p.Route, p.RegA, p.RegB)

	// Memory at an odd address, registered as it is.
	raw := make([]byte, 72)
	mem := raw[1:65]
	Random(t, mem)
	before = bytes.Clone(mem)
	odd, err := p.RegB.Register(mem, accessAtomic)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	defer p.RegB.Release(context.Background(), odd)
	for i, op := range []backend.Op{backend.OpCompareSwap, backend.OpFetchAdd} {
		rt := p.Route
		if i > 0 {
			rt = p.NewRoute(t)
		}
		err, atPost := p.verbRefused(t, rt, op, buffer.Buffer{}, Slice(t, odd, 8, 8), Operands{Swap: 1})
		if !errors.Is(err, f.MisalignedBaseErr) {
			t.Fatalf("%s on a word at an odd address: %v, want %v", op, err, f.MisalignedBaseErr)
		}
		AssertSame(t, "odd memory after a refused atomic", mem, before)
		p.afterDenied(t, rt, atPost) // an RDMA backend knows the address and may refuse at Post
	}
}

// testAtomicNeedsAccess: atomics on a buffer without AccessAtomic are
// refused and change nothing.
func testAtomicNeedsAccess(t *testing.T, f Factory) {
	p := NewVerbsPair(t, f, 1, 1)
	p.Need(t, backend.OpCompareSwap, backend.OpFetchAdd)
	hb, lb := Alloc(t, p.RegB, 64, buffer.AccessReadWrite)
	Random(t, lb)
	before := bytes.Clone(lb)
	for i, op := range []backend.Op{backend.OpCompareSwap, backend.OpFetchAdd} {
		rt := p.Route
		if i > 0 {
			rt = p.NewRoute(t)
		}
		cmp := ownerWord(t, lb, 8).Load() // a compare that would match
		if _, err := p.atomic(t, rt, op, Slice(t, hb, 8, 8), cmp, 1); !errors.Is(err, f.AtomicDeniedErr) {
			t.Fatalf("%s on a read-write buffer: %v, want %v", op, err, f.AtomicDeniedErr)
		}
		AssertSame(t, "buffer after a refused atomic", lb, before)
		p.afterRemoteError(t, rt)
	}
}
