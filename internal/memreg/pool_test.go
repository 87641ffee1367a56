//go:build linux

package memreg

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

func TestSizeClasses(t *testing.T) {
	for _, tc := range []struct {
		size uint64
		slot uint64 // 0: not pooled
	}{
		{1, 4096}, {8, 4096}, {64, 4096}, {65, 4096}, {1000, 4096}, {4095, 4096}, {4096, 4096},
		{4097, 8192}, {MaxPooled - 1, MaxPooled}, {MaxPooled, MaxPooled}, {MaxPooled + 1, 0}, {1 << 20, 0},
	} {
		c, ok := classOf(tc.size)
		switch {
		case tc.slot == 0 && ok:
			t.Errorf("size %d pooled in class %d", tc.size, c)
		case tc.slot != 0 && (!ok || uint64(1)<<(c+minClassShift) != tc.slot):
			t.Errorf("size %d: class %d (%v), want slot %d", tc.size, c, ok, tc.slot)
		}
	}
	g := newReg(t, buffer.Limits{})
	a, b := mustAlloc(t, g, 4096, buffer.AccessRead), mustAlloc(t, g, 3000, buffer.AccessRead)
	ra, rb := g.regionOf(t, a), g.regionOf(t, b)
	if ra.Slab() == nil || ra.Slab() != rb.Slab() {
		t.Fatalf("4096 and 3000 bytes not in one slab: %p %p", ra.Slab(), rb.Slab())
	}
	if d := int64(ra.fdOff) - int64(rb.fdOff); d != 4096 && d != -4096 {
		t.Errorf("slots at %d and %d, want 4096 apart", ra.fdOff, rb.fdOff)
	}
	if a.Region == b.Region || a.Key == b.Key {
		t.Errorf("two pooled buffers share an id or a key")
	}
	if big := g.regionOf(t, mustAlloc(t, g, MaxPooled+1, buffer.AccessRead)); big.Slab() != nil {
		t.Errorf("%d bytes pooled", MaxPooled+1)
	}
}

// TestPoolReuseOnlyAfterDrain checks that a released slot is handed out
// again only once its last reference is gone, and zeroed.
func TestPoolReuseOnlyAfterDrain(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	a := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	ra := g.regionOf(t, a)
	slab, off := ra.Slab(), ra.fdOff
	fill(mustBytes(t, g, a), 0xa5)
	ref, err := g.AcquireRemote(a.Region, a.Key, 0, 4096, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	wantErr(t, "Release with a remote reference", g.Release(ctx, a), context.DeadlineExceeded)
	var held []buffer.Buffer
	for range 40 { // a slot on the free list would be handed out first
		b := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
		if r := g.regionOf(t, b); r.Slab() == slab && r.fdOff == off {
			t.Fatalf("slot of a referenced region handed out again")
		}
		held = append(held, b)
	}
	if got := ref.Bytes()[100]; got != 0xa5 {
		t.Fatalf("referenced memory changed to %#x", got)
	}
	ref.Release()
	eventually(t, "slot freed", func() bool { return g.Stats().Bytes == uint64(len(held))*4096 })
	b := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	if r := g.regionOf(t, b); r.Slab() != slab || r.fdOff != off {
		t.Fatalf("freed slot not reused first (slab %d off %d, want %d %d)", r.Slab().ID(), r.fdOff, slab.ID(), off)
	}
	if i := nonZero(mustBytes(t, g, b)); i >= 0 {
		t.Fatalf("reused slot shows byte %d of its previous owner", i)
	}
	if b.Key == a.Key || b.Region == a.Region {
		t.Errorf("reused slot kept the old key or id")
	}
	_, err = g.AcquireRemote(a.Region, a.Key, 0, 1, buffer.AccessRead)
	wantErr(t, "old handle on the reused slot", err, rdmamgr.ErrReleased)
}

// TestPoolZeroed checks every class: a slot released with its bytes set is
// zero when handed out again, over the whole of the new (larger) request.
func TestPoolZeroed(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	for c := range numClasses {
		slot := uint64(1) << (c + minClassShift)
		small := slot/2 + 1
		a := mustAlloc(t, g, small, buffer.AccessRead)
		ra := g.regionOf(t, a)
		fill(mustBytes(t, g, a), 0xff)
		if err := g.Release(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		b := mustAlloc(t, g, slot, buffer.AccessRead)
		rb := g.regionOf(t, b)
		if rb.Slab() != ra.Slab() || rb.fdOff != ra.fdOff {
			t.Fatalf("slot %d: released slot not reused", slot)
		}
		if i := nonZero(mustBytes(t, g, b)); i >= 0 {
			t.Fatalf("slot %d: byte %d not zeroed", slot, i)
		}
	}
}

// TestPoolLimits checks that limits count the requested bytes and regions,
// and that slab memory stops at MaxBytes, where buffers get memfds of
// their own.
func TestPoolLimits(t *testing.T) {
	g := newReg(t, buffer.Limits{MaxBytes: SlabSize + MaxPooled, MaxRegions: 18})
	var bufs []buffer.Buffer
	for i := range SlabSize / MaxPooled { // fills one slab
		bufs = append(bufs, mustAlloc(t, g, MaxPooled, buffer.AccessRead))
		if g.regionOf(t, bufs[i]).Slab() == nil {
			t.Fatalf("buffer %d not pooled", i)
		}
	}
	own := mustAlloc(t, g, MaxPooled, buffer.AccessRead) // a second slab would pass the cap
	if g.regionOf(t, own).Slab() != nil {
		t.Fatalf("slab memory passed MaxBytes")
	}
	if st := g.Stats(); st.Bytes != SlabSize+MaxPooled || st.Slabs != 1 || st.Regions != 17 {
		t.Fatalf("Stats %+v", st)
	}
	_, err := g.Allocate(1, buffer.AccessRead)
	wantErr(t, "Allocate past MaxBytes", err, rdmamgr.ErrLimit)
	g2 := newReg(t, buffer.Limits{MaxRegions: 3})
	for range 3 {
		mustAlloc(t, g2, 8, buffer.AccessRead)
	}
	_, err = g2.Allocate(8, buffer.AccessRead)
	wantErr(t, "pooled Allocate past MaxRegions", err, rdmamgr.ErrLimit)
}

// TestPoolSlabsReturned checks that empty slabs are unmapped and their
// fds closed, but maxSpareSlabs spares, which serve any class.
func TestPoolSlabsReturned(t *testing.T) {
	g := NewRegistry(testOwner, buffer.Limits{})
	per := SlabSize / MaxPooled
	var bufs []buffer.Buffer
	fds := map[int]fdID{}
	for range 3 * per {
		b := mustAlloc(t, g, MaxPooled, buffer.AccessRead)
		bufs = append(bufs, b)
		fd, _, _ := g.regionOf(t, b).Memfd()
		fds[fd] = idOf(t, fd)
	}
	if st := g.Stats(); st.Slabs != 3 || len(fds) != 3 {
		t.Fatalf("%d slabs, %d fds for %d buffers of %d bytes", st.Slabs, len(fds), len(bufs), MaxPooled)
	}
	for _, b := range bufs {
		if err := g.Release(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if st := g.Stats(); st.Slabs != maxSpareSlabs {
		t.Fatalf("%d slabs after releasing everything, want the %d spares", st.Slabs, maxSpareSlabs)
	}
	if open := openFDs(fds); open != maxSpareSlabs {
		t.Fatalf("%d slab fds open after releasing everything, want the spares'", open)
	}
	// A spare serves another class, carved anew, all zeros.
	small := mustAlloc(t, g, 100, buffer.AccessRead)
	fd, _, _ := g.regionOf(t, small).Memfd()
	if _, ok := fds[fd]; !ok || g.Stats().Slabs != maxSpareSlabs || nonZero(mustBytes(t, g, small)) >= 0 {
		t.Fatalf("a 100-byte buffer did not reuse a spare slab (fd %d, %d slabs)", fd, g.Stats().Slabs)
	}
	if err := g.Release(context.Background(), small); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := g.Stats(); st.Slabs != 0 || openFDs(fds) != 0 {
		t.Fatalf("after Close: %d slabs, %d fds open", st.Slabs, openFDs(fds))
	}
}

// TestPoolConcurrent allocates and releases from many goroutines (run it
// with -race): every new buffer is zero, and nothing is left.
func TestPoolConcurrent(t *testing.T) {
	g := NewRegistry(testOwner, buffer.Limits{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var held []buffer.Buffer
			for i := range 300 {
				b, err := g.Allocate(1+rng.Uint64N(MaxPooled+4096), buffer.AccessReadWrite)
				if err != nil {
					errs <- err
					return
				}
				mem, _ := g.Bytes(b)
				if j := nonZero(mem); j >= 0 {
					errs <- errors.New("new buffer not zero")
					return
				}
				fill(mem, byte(w+1))
				held = append(held, b)
				if i%3 != 0 || len(held) > 20 {
					k := rng.IntN(len(held))
					if err := g.Release(context.Background(), held[k]); err != nil {
						errs <- err
						return
					}
					held = append(held[:k], held[k+1:]...)
				}
			}
			for _, b := range held {
				_ = g.Release(context.Background(), b)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := g.Stats(); !idle(st) {
		t.Fatalf("Stats after releasing everything %+v", st)
	}
	if err := g.Close(context.Background()); err != nil || g.Stats().Slabs != 0 {
		t.Fatalf("Close: %v, %d slabs left", err, g.Stats().Slabs)
	}
}

func fill(p []byte, c byte) {
	for i := range p {
		p[i] = c
	}
}

// nonZero returns the index of the first non-zero byte of p, or -1.
func nonZero(p []byte) int {
	for i, c := range p {
		if c != 0 {
			return i
		}
	}
	return -1
}
