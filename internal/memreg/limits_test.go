package memreg

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// TestMaxRegion: one request over MaxRegion is refused before any mapping,
// for allocated and for user memory, and changes nothing.
func TestMaxRegion(t *testing.T) {
	g := newReg(t, buffer.Limits{MaxRegion: 1 << 20, MaxBytes: 4 << 20, MaxRegions: 8})
	if _, err := g.Allocate(1<<20+1, buffer.AccessReadWrite); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("allocate over MaxRegion: %v, want rdmamgr.ErrLimit", err)
	}
	if _, err := g.Register(make([]byte, 1<<20+1), buffer.AccessReadWrite); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("register over MaxRegion: %v, want rdmamgr.ErrLimit", err)
	}
	if _, err := g.Allocate(1<<46, buffer.AccessReadWrite); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("allocate 64 TiB: %v, want rdmamgr.ErrLimit", err)
	}
	if st := g.Stats(); st.Regions != 0 || st.Bytes != 0 {
		t.Fatalf("refusals changed the registry: %+v", st)
	}
	if _, err := g.Allocate(1<<20, buffer.AccessReadWrite); err != nil {
		t.Fatalf("allocate MaxRegion bytes: %v", err)
	}
}

func TestLimitMaxBytes(t *testing.T) {
	page := uint64(os.Getpagesize())
	ctx := context.Background()
	g := newReg(t, buffer.Limits{MaxBytes: 2 * page})
	_, err := g.Allocate(2*page+1, buffer.AccessRead)
	wantErr(t, "Allocate over MaxBytes", err, rdmamgr.ErrLimit)
	a := mustAlloc(t, g, page, buffer.AccessRead)
	b := mustAlloc(t, g, page-10, buffer.AccessRead)
	_, err = g.Allocate(11, buffer.AccessRead)
	wantErr(t, "Allocate past MaxBytes", err, rdmamgr.ErrLimit)
	_, err = g.Register(make([]byte, 11), buffer.AccessRead)
	wantErr(t, "Register past MaxBytes", err, rdmamgr.ErrLimit)
	c := mustAlloc(t, g, 10, buffer.AccessRead) // exactly at the limit
	if st := g.Stats(); st.Bytes != 2*page || st.Regions != 3 {
		t.Errorf("Stats %+v", st)
	}
	_, err = g.Allocate(1, buffer.AccessRead)
	wantErr(t, "Allocate at MaxBytes", err, rdmamgr.ErrLimit)
	for _, x := range []buffer.Buffer{a, b, c} {
		if err := g.Release(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if st := g.Stats(); !idle(st) {
		t.Errorf("Stats after releases %+v", st)
	}
	mustAlloc(t, g, 2*page, buffer.AccessRead)
}

func TestLimitMaxRegions(t *testing.T) {
	ctx := context.Background()
	g := newReg(t, buffer.Limits{MaxRegions: 2})
	a := mustAlloc(t, g, 1, buffer.AccessRead)
	if _, err := g.Register(make([]byte, 1), buffer.AccessRead); err != nil {
		t.Fatal(err)
	}
	_, err := g.Allocate(1, buffer.AccessRead)
	wantErr(t, "Allocate past MaxRegions", err, rdmamgr.ErrLimit)
	_, err = g.Register(make([]byte, 1), buffer.AccessRead)
	wantErr(t, "Register past MaxRegions", err, rdmamgr.ErrLimit)
	if err := g.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	mustAlloc(t, g, 1, buffer.AccessRead)
	if st := g.Stats(); st.Regions != 2 || st.Bytes != 2 {
		t.Errorf("Stats %+v", st)
	}
}

func TestLimitMaxRegionsConcurrent(t *testing.T) {
	ctx := context.Background()
	const max = 4
	for round := 0; round < 20; round++ {
		g := NewRegistry(testOwner, buffer.Limits{MaxRegions: max})
		var ok atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := g.Allocate(1, buffer.AccessRead)
				switch {
				case err == nil:
					ok.Add(1)
				case !errors.Is(err, rdmamgr.ErrLimit):
					t.Errorf("Allocate: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := ok.Load(); n != max || g.Stats().Regions != max {
			t.Fatalf("round %d: %d allocations succeeded, %d regions, limit %d", round, n, g.Stats().Regions, max)
		}
		if err := g.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBytesAccounting(t *testing.T) {
	ctx := context.Background()
	g := newReg(t, buffer.Limits{})
	var bufs []buffer.Buffer
	var want uint64
	for i := uint64(1); i <= 20; i++ {
		size := i * 1000
		if i%2 == 0 {
			b, err := g.Register(make([]byte, size), buffer.AccessReadWrite)
			if err != nil {
				t.Fatal(err)
			}
			bufs = append(bufs, b)
		} else {
			bufs = append(bufs, mustAlloc(t, g, size, buffer.AccessReadWrite))
		}
		want += size
		if st := g.Stats(); st.Bytes != want || st.Regions != int(i) {
			t.Fatalf("Stats %+v, want %d bytes", st, want)
		}
	}
	for i, b := range bufs {
		if err := g.Release(ctx, b); err != nil {
			t.Fatal(err)
		}
		want -= b.Length
		if st := g.Stats(); st.Bytes != want || st.Regions != len(bufs)-i-1 {
			t.Fatalf("Stats %+v, want %d bytes", st, want)
		}
	}
	if st := g.Stats(); !idle(st) {
		t.Errorf("Stats after releases %+v", st)
	}
}
