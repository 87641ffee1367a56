//go:build ibverbs

package ibverbs

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/word"
)

const accessAtomicRW = buffer.AccessReadWrite | buffer.AccessAtomic

// atomicWR returns an atomic work request on the word remote names.
func atomicWR(op backend.Op, remote buffer.Buffer, compare, swap uint64) *backend.WorkRequest {
	return &backend.WorkRequest{Op: op, Remote: remote, Compare: compare, Swap: swap, Deadline: time.Now().Add(waitTimeout)}
}

// doAtomic runs one atomic and returns the old value.
func doAtomic(t testing.TB, rt backend.Route, op backend.Op, remote buffer.Buffer, compare, swap uint64) (uint64, error) {
	t.Helper()
	wr := atomicWR(op, remote, compare, swap)
	err := backendtest.DoWR(t, waitTimeout, rt, wr)
	return wr.Result, err
}

// ownerWord returns the owner's view of the word at off of h (its
// sync/atomic).
func ownerWord(t testing.TB, mem []byte, off uint64) interface {
	Load() uint64
	Add(uint64) uint64
} {
	t.Helper()
	w, err := word.At(mem, off)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestAtomics: CompareAndSwap and FetchAdd return the old value, change
// the word as the owner's sync/atomic sees it, and see the owner's own
// atomic updates.
func TestAtomics(t *testing.T) {
	requireDevices(t)
	a, _ := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	if !a.Supports(backend.OpFetchAdd) || !a.Supports(backend.OpCompareSwap) {
		t.Fatal("rxe backend does not support atomics")
	}
	rt := connect(t, a, b)
	h, mem := backendtest.Alloc(t, regB, 64, accessAtomicRW)
	w0, w1 := ownerWord(t, mem, 0), ownerWord(t, mem, 8)
	word0, word1 := backendtest.Slice(t, h, 0, 8), backendtest.Slice(t, h, 8, 8)

	for _, step := range []struct {
		op                  backend.Op
		remote              buffer.Buffer
		compare, swap, want uint64
	}{
		{backend.OpCompareSwap, word0, 0, 42, 0},   // swaps
		{backend.OpCompareSwap, word0, 1, 7, 42},   // compare fails: unchanged
		{backend.OpFetchAdd, word1, 0, 5, 0},       // 0 -> 5
		{backend.OpFetchAdd, word1, 0, 1 << 40, 5}, // 5 -> 5 + 2^40
		{backend.OpCompareSwap, word0, 42, 1<<63 | 3, 42},
	} {
		got, err := doAtomic(t, rt, step.op, step.remote, step.compare, step.swap)
		if err != nil {
			t.Fatalf("%s: %v", step.op, err)
		}
		if got != step.want {
			t.Fatalf("%s(compare %d, swap/add %d): old value %d, want %d", step.op, step.compare, step.swap, got, step.want)
		}
	}
	if got := w0.Load(); got != 1<<63|3 {
		t.Errorf("word 0 is %#x, want %#x", got, uint64(1<<63|3))
	}
	if got := w1.Load(); got != 5+1<<40 {
		t.Errorf("word 1 is %d, want %d", got, uint64(5+1<<40))
	}
	// The owner's sync/atomic and the peer's FetchAdd agree.
	w1.Add(1000)
	got, err := doAtomic(t, rt, backend.OpFetchAdd, word1, 0, 1)
	if err != nil || got != 5+1<<40+1000 {
		t.Fatalf("FetchAdd after the owner's Add: %d, %v; want %d", got, err, uint64(5+1<<40+1000))
	}
	for i := 2; i < 8; i++ { // the other words are untouched
		if v := ownerWord(t, mem, uint64(8*i)).Load(); v != 0 {
			t.Errorf("word %d changed to %d", i, v)
		}
	}
}

// TestFetchAddConcurrent: several initiators (each its own backend and
// route, several posters each) and the owner add to one counter at once;
// the sum is exact and every old value is seen exactly once.
func TestFetchAddConcurrent(t *testing.T) {
	requireDevices(t)
	const peers, posters, each = 3, 4, 50
	owner, regO := started(t, DefaultConfig(), 100)
	h, mem := backendtest.Alloc(t, regO, 8, accessAtomicRW)
	counter := ownerWord(t, mem, 0)
	seen := make([]bool, peers*posters*each)
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = make(chan error, peers*posters+1)
	)
	for p := range peers {
		a, _ := started(t, DefaultConfig(), uint64(p+1))
		rt := connect(t, a, owner)
		for range posters {
			wg.Go(func() {
				for range each {
					wr := atomicWR(backend.OpFetchAdd, h, 0, 1<<32)
					rec := backendtest.NewRecorder(1)
					wr.Done = rec
					if err := rt.Post(wr); err != nil {
						errs <- err
						return
					}
					var res backendtest.Result
					select {
					case res = <-rec.Results():
					case <-time.After(waitTimeout):
						errs <- errors.New("no completion")
						return
					}
					if res.Err != nil {
						errs <- res.Err
						return
					}
					i := wr.Result >> 32
					mu.Lock()
					if i >= uint64(len(seen)) || seen[i] {
						mu.Unlock()
						errs <- errors.New("an old value seen twice or out of range")
						return
					}
					seen[i] = true
					mu.Unlock()
				}
			})
		}
	}
	wg.Go(func() { // the owner adds in the low half meanwhile
		for range 1000 {
			counter.Add(1)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got, want := counter.Load(), uint64(peers*posters*each)<<32+1000; got != want {
		t.Fatalf("counter %#x, want %#x", got, want)
	}
}

// TestAtomicRefusals: misaligned or wrongly sized words are refused before
// anything is posted; a buffer without AccessAtomic is refused by the
// owner's device (a remote access error, which ends the RC route).
func TestAtomicRefusals(t *testing.T) {
	requireDevices(t)
	a, _ := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	rt := connect(t, a, b)
	h, _ := backendtest.Alloc(t, regB, 64, accessAtomicRW)
	for _, tc := range []struct {
		name   string
		remote buffer.Buffer
	}{
		{"offset 4", backendtest.Slice(t, h, 4, 8)},
		{"16 bytes", backendtest.Slice(t, h, 8, 16)},
		{"4 bytes", backendtest.Slice(t, h, 8, 4)},
	} {
		for _, op := range []backend.Op{backend.OpCompareSwap, backend.OpFetchAdd} {
			wr := atomicWR(op, tc.remote, 0, 1)
			if err := rt.Post(wr); !errors.Is(err, rdmamgr.ErrMisaligned) {
				t.Errorf("%s %s: %v, want ErrMisaligned", op, tc.name, err)
			}
		}
	}
	// An RDMA address off 8 (a forged handle): refused before posting too.
	forged := backendtest.Slice(t, h, 8, 8)
	forged.RDMA.Addr += 4
	if _, err := doAtomic(t, rt, backend.OpFetchAdd, forged, 0, 1); !errors.Is(err, rdmamgr.ErrMisaligned) {
		t.Errorf("FetchAdd on a misaligned address: %v, want ErrMisaligned", err)
	}
	// The route still works after the refusals.
	if got, err := doAtomic(t, rt, backend.OpFetchAdd, backendtest.Slice(t, h, 0, 8), 0, 1); err != nil || got != 0 {
		t.Fatalf("FetchAdd after refusals: %d, %v", got, err)
	}

	// No AccessAtomic: the handle claims it, the memory region does not.
	plain, mem := backendtest.Alloc(t, regB, 64, buffer.AccessReadWrite)
	plain = backendtest.Slice(t, plain, 0, 8)
	plain.Access |= buffer.AccessAtomic
	if _, err := doAtomic(t, rt, backend.OpFetchAdd, plain, 0, 1); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("FetchAdd on a buffer without AccessAtomic: %v, want rdmamgr.ErrAccess", err)
	}
	if v := ownerWord(t, mem, 0).Load(); v != 0 {
		t.Fatalf("refused FetchAdd changed the word to %d", v)
	}
}

// TestAtomicsNegotiated: a backend whose device has no atomics (here:
// DisableAtomics) says so, and routes to and from it refuse atomics
// before posting anything, while Put still works.
func TestAtomicsNegotiated(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	cfg := DefaultConfig()
	cfg.DisableAtomics = true
	b, regB := started(t, cfg, 2)
	if b.Supports(backend.OpFetchAdd) || b.Supports(backend.OpCompareSwap) {
		t.Fatal("a backend without atomics supports them")
	}
	if !b.Supports(backend.OpWrite) || !b.Supports(backend.OpWriteImm) || !b.Supports(backend.OpSend) {
		t.Fatal("a backend without atomics does not support Put, PutWithImm or Send")
	}
	hb, _ := backendtest.Alloc(t, regB, 64, accessAtomicRW)
	ha, _ := backendtest.Alloc(t, regA, 64, accessAtomicRW)
	ab, ba := connect(t, a, b), connect(t, b, a)
	for _, tc := range []struct {
		name   string
		rt     backend.Route
		remote buffer.Buffer
	}{
		{"to a peer without", ab, hb},
		{"from a backend without", ba, ha},
	} {
		for _, op := range []backend.Op{backend.OpCompareSwap, backend.OpFetchAdd} {
			wr := atomicWR(op, backendtest.Slice(t, tc.remote, 0, 8), 0, 1)
			rec := backendtest.NewRecorder(1)
			wr.Done = rec
			if err := tc.rt.Post(wr); !errors.Is(err, rdmamgr.ErrNotSupported) {
				t.Errorf("%s %s: %v, want ErrNotSupported", op, tc.name, err)
			}
			rec.None(t)
		}
	}
	if err := backendtest.Do(t, waitTimeout, ab, regA, backend.OpWrite, ha, hb); err != nil {
		t.Fatalf("Put on a route without atomics: %v", err)
	}
}
