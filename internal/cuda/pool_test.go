package cuda_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
)

type fakeEnv struct {
	w   *cudafake.World
	d   *cudafake.Driver
	ctx cuda.Context
	p   *cuda.Pool
}

func newFakeEnv(t *testing.T, cfg cudafake.Config) *fakeEnv {
	t.Helper()
	w := cudafake.NewWorld(cfg)
	d := w.Process()
	ctx, err := d.PrimaryContext(0)
	if err != nil {
		t.Fatal(err)
	}
	e := &fakeEnv{w: w, d: d, ctx: ctx, p: cuda.NewPool(d, ctx)}
	t.Cleanup(func() { e.p.Close(); d.Close() })
	return e
}

// read copies n bytes at p to the host.
func (e *fakeEnv) read(t *testing.T, p cuda.DevicePtr, n int) []byte {
	t.Helper()
	s, err := e.d.StreamCreate(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.d.StreamDestroy(e.ctx, s)
	b := make([]byte, n)
	if err := e.d.CopyDtoH(e.ctx, b, p, s); err != nil {
		t.Fatal(err)
	}
	if err := e.d.StreamSynchronize(e.ctx, s); err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *fakeEnv) write(t *testing.T, p cuda.DevicePtr, b []byte) {
	t.Helper()
	s, err := e.d.StreamCreate(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.d.StreamDestroy(e.ctx, s)
	if err := e.d.CopyHtoD(e.ctx, p, b, s); err != nil {
		t.Fatal(err)
	}
	if err := e.d.StreamSynchronize(e.ctx, s); err != nil {
		t.Fatal(err)
	}
}

func TestPoolClasses(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{})
	const slots = cuda.PoolSlab / 4096
	var blocks []cuda.Block
	seen := map[cuda.DevicePtr]bool{}
	for i := 0; i < slots+1; i++ {
		b, err := e.p.Alloc(uint64(1+i%4096), false)
		if err != nil {
			t.Fatal(err)
		}
		if b.Own() || seen[b.Ptr] || b.Ptr%4096 != 0 {
			t.Fatalf("block %d: %+v (own, reused or misaligned)", i, b)
		}
		seen[b.Ptr] = true
		blocks = append(blocks, b)
	}
	if st := e.p.Stats(); st.Slabs != 2 || st.InUse != slots+1 {
		t.Fatalf("%d 4 KiB blocks: %+v, want 2 slabs", slots+1, st)
	}
	big, err := e.p.Alloc(cuda.MaxPooled, false)
	if err != nil || big.Own() {
		t.Fatalf("1 MiB: %+v, %v; want a slot", big, err)
	}
	if e.w.Stats().LiveAllocs != 3 {
		t.Fatalf("fake allocations %+v, want 3 slabs", e.w.Stats())
	}
	for _, b := range append(blocks, big) {
		if err := e.p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	if st, ws := e.p.Stats(), e.w.Stats(); st.Slabs != 0 || st.InUse != 0 || st.Spares != 2 || ws.LiveAllocs != 2 {
		t.Fatalf("after freeing all: pool %+v, driver %+v; want 2 spare slabs", st, ws)
	}
	// A spare is re-carved for another class, without a driver allocation,
	// and reads as zeros.
	allocs := e.w.Stats().Allocs
	b, err := e.p.Alloc(300000, false)
	if err != nil {
		t.Fatal(err)
	}
	if e.w.Stats().Allocs != allocs || e.p.Stats().Spares != 1 {
		t.Fatalf("a spare slab was not reused: %+v", e.p.Stats())
	}
	if got := e.read(t, b.Ptr, 300000); !bytes.Equal(got, make([]byte, 300000)) {
		t.Fatal("a re-carved spare shows old bytes")
	}
	e.p.Free(b)
}

// TestPoolFreshZero: a block of a fresh slab, or of its own, reads as
// zeros, though the driver's fresh memory is not (the stand-in fills it).
func TestPoolFreshZero(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{})
	for _, own := range []bool{false, true} {
		b, err := e.p.Alloc(10000, own)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.read(t, b.Ptr, 10000); !bytes.Equal(got, make([]byte, 10000)) {
			t.Fatalf("own=%v: a fresh block is not zeroed", own)
		}
		e.p.Free(b)
	}
}

// TestPoolZeroes: a slot handed out again reads as zeros, never as the
// previous owner's bytes.
func TestPoolZeroes(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{})
	keep, err := e.p.Alloc(8192, false) // keeps the slab alive
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.p.Alloc(8192, false)
	if err != nil {
		t.Fatal(err)
	}
	e.write(t, b.Ptr, bytes.Repeat([]byte{0xAB}, 8192))
	if err := e.p.Free(b); err != nil {
		t.Fatal(err)
	}
	again, err := e.p.Alloc(5000, false)
	if err != nil {
		t.Fatal(err)
	}
	if again.Ptr != b.Ptr {
		t.Fatalf("slot not reused (%#x, was %#x): the test proves nothing", again.Ptr, b.Ptr)
	}
	if got := e.read(t, again.Ptr, 8192); !bytes.Equal(got, make([]byte, 8192)) {
		t.Fatal("a reused slot shows the previous owner's bytes")
	}
	if st := e.p.Stats(); st.Zeroed != 1 {
		t.Fatalf("stats %+v", st)
	}
	e.p.Free(keep)
	e.p.Free(again)
}

func TestPoolOwn(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{})
	for _, c := range []struct {
		size uint64
		own  bool
	}{{100, true}, {cuda.MaxPooled + 1, false}} {
		b, err := e.p.Alloc(c.size, c.own)
		if err != nil {
			t.Fatal(err)
		}
		if !b.Own() || b.Size != c.size {
			t.Fatalf("Alloc(%d, %v) = %+v, want its own allocation", c.size, c.own, b)
		}
		// Its own allocation: an IPC handle names exactly it.
		if _, err := e.d.IPCGetMemHandle(e.ctx, b.Ptr); err != nil {
			t.Fatal(err)
		}
		before := e.w.Stats().LiveAllocs
		if err := e.p.Free(b); err != nil {
			t.Fatal(err)
		}
		if after := e.w.Stats().LiveAllocs; after != before-1 {
			t.Fatalf("Free of an own block: driver allocations %d -> %d, want it freed", before, after)
		}
	}
}

func TestPoolRefusals(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{DeviceMemory: 3 << 20})
	if _, err := e.p.Alloc(0, false); !errors.Is(err, rdmamgr.ErrInvalid) {
		t.Fatalf("Alloc(0): %v", err)
	}
	if _, err := e.p.Alloc(4<<20, false); !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Fatalf("past the device: %v", err)
	}
	a, err := e.p.Alloc(4096, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.p.Alloc(4096, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.p.Free(a); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Free(a); !errors.Is(err, rdmamgr.ErrInvalid) {
		t.Fatalf("double Free: %v", err)
	}
	if err := e.p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Alloc(1, false); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("Alloc after Close: %v", err)
	}
	if err := e.p.Free(b); err != nil {
		t.Fatalf("Free after Close: %v", err)
	}
	if ws := e.w.Stats(); ws.LiveAllocs != 0 || ws.Streams != 0 {
		t.Fatalf("Close left driver state: %+v", ws)
	}
}

func TestPoolConcurrent(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				b, err := e.p.Alloc(uint64(1+(g*977+i*131)%(2*cuda.MaxPooled)), i%17 == 0)
				if err == nil {
					err = e.p.Free(b)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := e.p.Stats(); st.InUse != 0 || st.Slabs != 0 || st.Spares > 2 {
		t.Fatalf("stats %+v", st)
	}
}
