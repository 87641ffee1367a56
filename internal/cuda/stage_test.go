package cuda_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
)

const testChunk = 4096

// TestStagerRoundTrip: Upload then Download move every byte, at every
// size around the chunk boundaries, through pinned buffers only.
func TestStagerRoundTrip(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{})
	s, err := cuda.NewStager(e.d, e.ctx, testChunk)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	blk, err := e.p.Alloc(8*testChunk, true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.p.Free(blk)
	for _, n := range []int{1, testChunk - 1, testChunk, testChunk + 1, 2 * testChunk, 5*testChunk + 7, 8 * testChunk} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(rand.Uint32())
		}
		before := e.w.Stats().PageableCopies
		off := 0
		err := s.Upload(blk.Ptr, uint64(n), func(p []byte) error {
			if len(p) > testChunk || len(p) == 0 {
				t.Fatalf("fill of %d bytes", len(p))
			}
			off += copy(p, src[off:])
			return nil
		})
		if err != nil || off != n {
			t.Fatalf("Upload %d: %v (%d filled)", n, err, off)
		}
		var got []byte
		if err := s.Download(blk.Ptr, uint64(n), func(p []byte) error { got = append(got, p...); return nil }); err != nil {
			t.Fatal(err)
		}
		if st := e.w.Stats(); st.PageableCopies != before || st.FailedCopies != 0 {
			t.Fatalf("stats %+v: staging copied through unpinned memory", st)
		}
		if dev := e.read(t, blk.Ptr, n); !bytes.Equal(dev, src) {
			t.Fatalf("Upload %d: device bytes differ", n)
		}
		if !bytes.Equal(got, src) {
			t.Fatalf("Download %d: bytes differ", n)
		}
	}
}

// TestStagerOverlaps: the next chunk's copy is queued before the caller
// consumes (Download) or fills (Upload) the current one: the socket I/O
// of one chunk overlaps the device copy of the next.
func TestStagerOverlaps(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{})
	s, err := cuda.NewStager(e.d, e.ctx, testChunk)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	blk, err := e.p.Alloc(4*testChunk, true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.p.Free(blk)
	base := e.w.Stats().CopiesDtoH
	k := 0
	err = s.Download(blk.Ptr, 4*testChunk, func(p []byte) error {
		// While chunk k is consumed, chunk k+1's copy was queued already:
		// it runs to its end before this returns (or never: a hang).
		deadline := time.Now().Add(10 * time.Second)
		for k < 3 && e.w.Stats().CopiesDtoH-base < k+2 {
			if time.Now().After(deadline) {
				t.Fatalf("consuming chunk %d: chunk %d's copy never ran (not queued: no overlap)", k, k+1)
			}
			time.Sleep(100 * time.Microsecond)
		}
		k++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Upload: chunk 1 is filled while chunk 0's copy is held in flight
	// (World.Hold); a stager that waited for it first would never get here.
	release := e.w.Hold()
	held := true
	k = 0
	err = s.Upload(blk.Ptr, 4*testChunk, func(p []byte) error {
		if k == 1 && held {
			release() // proved: filling chunk 1 while chunk 0's copy could not start
			held = false
		}
		k++
		return nil
	})
	if held {
		release()
	}
	if err != nil || k != 4 {
		t.Fatalf("Upload: %v after %d chunks", err, k)
	}
}

// TestStagerErrorLeavesNothingInFlight: an error from the caller ends the
// pipeline with no copy queued (the caller may release the memory).
func TestStagerErrorLeavesNothingInFlight(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{})
	s, err := cuda.NewStager(e.d, e.ctx, testChunk)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	blk, err := e.p.Alloc(4*testChunk, true)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("socket gone")
	if err := s.Download(blk.Ptr, 4*testChunk, func([]byte) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Download: %v", err)
	}
	n := 0
	if err := s.Upload(blk.Ptr, 4*testChunk, func([]byte) error {
		if n++; n == 3 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) {
		t.Fatalf("Upload: %v", err)
	}
	// Freed at once: a copy still queued would fail the stream with
	// ErrIllegalAddress (the stand-in checks).
	if err := e.p.Free(blk); err != nil {
		t.Fatal(err)
	}
	if st := e.w.Stats(); st.FailedCopies != 0 {
		t.Fatalf("a copy ran after the stager returned: %+v", st)
	}
	// Out of bounds: the driver's error, nothing left running.
	small, _ := e.p.Alloc(testChunk, false)
	defer e.p.Free(small)
	if err := s.Download(small.Ptr, 3<<20, func([]byte) error { return nil }); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Fatalf("Download past the allocation: %v", err)
	}
}

// TestStagers: Get reuses what Put gave back, per context; after Close
// Get fails with ErrClosed and a Stager put back is freed.
func TestStagers(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{})
	p := cuda.NewStagers(testChunk, 0, 0)
	a, err := p.Get(e.d, e.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.Get(e.d, e.ctx, 0)
	if a == b || a.Chunk() != testChunk {
		t.Fatalf("two Gets, one Stager (or chunk %d)", a.Chunk())
	}
	p.Put(a)
	if c, _ := p.Get(e.d, e.ctx, 0); c != a {
		t.Fatalf("Get after Put made a new Stager")
	}
	p.Put(a)
	live := e.w.Stats().LiveHost
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p.Put(b)
	if got := e.w.Stats().LiveHost; got != live-4 {
		t.Fatalf("pinned buffers live %d after Close, want %d", got, live-4)
	}
	if _, err := p.Get(e.d, e.ctx, 0); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}

// syncDriver is a Driver whose copies run at once (the stand-in's
// queued closures allocate; ours must not): only what Stager calls.
type syncDriver struct {
	cuda.Driver
	dev []byte
}

func (d *syncDriver) CopyDtoH(_ cuda.Context, dst []byte, src cuda.DevicePtr, _ cuda.Stream) error {
	copy(dst, d.dev[src:])
	return nil
}

func (d *syncDriver) CopyHtoD(_ cuda.Context, dst cuda.DevicePtr, src []byte, _ cuda.Stream) error {
	copy(d.dev[dst:], src)
	return nil
}
func (d *syncDriver) StreamSynchronize(cuda.Context, cuda.Stream) error  { return nil }
func (d *syncDriver) HostAlloc(_ cuda.Context, n uint64) ([]byte, error) { return make([]byte, n), nil }
func (d *syncDriver) HostFree(cuda.Context, []byte) error                { return nil }
func (d *syncDriver) StreamCreate(cuda.Context) (cuda.Stream, error)     { return 1, nil }
func (d *syncDriver) StreamDestroy(cuda.Context, cuda.Stream) error      { return nil }

// TestStagerAllocs: an operation through a Stager from Stagers allocates
// nothing.
func TestStagerAllocs(t *testing.T) {
	d := &syncDriver{dev: make([]byte, 1<<20)}
	p := cuda.NewStagers(64<<10, 0, 0)
	defer p.Close()
	sink := 0
	emit := func(b []byte) error { sink += len(b); return nil }
	fill := func(b []byte) error { b[0] = 1; return nil }
	allocs := testing.AllocsPerRun(50, func() {
		s, err := p.Get(d, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Upload(0, 1<<20, fill); err != nil {
			t.Fatal(err)
		}
		if err := s.Download(0, 1<<20, emit); err != nil {
			t.Fatal(err)
		}
		p.Put(s)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per operation, want 0", allocs)
	}
}
