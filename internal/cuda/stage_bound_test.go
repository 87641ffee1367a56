package cuda_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/cuda"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
)

// TestStagersBounded: pinned memory is given back. At most maxOut
// Stagers are out (a Get past it waits for a Put, or fails with ErrLimit
// once its wait ran out), and Put frees those past maxIdle idle, so after
// a burst the pinned memory falls back to maxIdle Stagers' worth.
func TestStagersBounded(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{})
	base := e.w.Stats().LiveHost
	p := cuda.NewStagers(testChunk, 3, 1)
	defer p.Close()
	var out []*cuda.Stager
	for range 3 {
		s, err := p.Get(e.d, e.ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if _, err := p.Get(e.d, e.ctx, 0); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("Get past maxOut, no wait: %v, want ErrLimit", err)
	}
	if _, err := p.Get(e.d, e.ctx, 20*time.Millisecond); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("Get past maxOut, wait run out: %v, want ErrLimit", err)
	}
	if got := e.w.Stats().LiveHost - base; got != 6 {
		t.Fatalf("%d pinned buffers live with 3 Stagers out, want 6", got)
	}
	// A waiting Get gets the one Put back.
	done := make(chan *cuda.Stager)
	go func() {
		s, err := p.Get(e.d, e.ctx, time.Minute)
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	time.Sleep(10 * time.Millisecond)
	p.Put(out[0])
	out[0] = <-done
	if out[0] == nil {
		t.FailNow()
	}
	for _, s := range out {
		p.Put(s)
	}
	if got := e.w.Stats().LiveHost - base; got != 2 {
		t.Fatalf("%d pinned buffers live with all Stagers back, want 2 (maxIdle 1)", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.w.Stats().LiveHost - base; got != 0 {
		t.Fatalf("%d pinned buffers live after Close", got)
	}
}

// syncFails is a Driver whose StreamSynchronize fails while armed (an
// asynchronous copy's error, sticky on the real driver's stream).
type syncFails struct {
	cuda.Driver
	armed bool
}

func (d *syncFails) StreamSynchronize(ctx cuda.Context, s cuda.Stream) error {
	if d.armed {
		return cuda.Check("cuStreamSynchronize", cuda.ErrorIllegalAddress)
	}
	return d.Driver.StreamSynchronize(ctx, s)
}

// TestStagersDropBroken: a Stager whose copy failed on its stream is not
// given out again: Put frees it (its pinned buffers and streams), and the
// next Get makes a fresh one. A caller's own error does not break it.
func TestStagersDropBroken(t *testing.T) {
	e := newFakeEnv(t, cudafake.Config{})
	d := &syncFails{Driver: e.d}
	p := cuda.NewStagers(testChunk, 0, 0)
	defer p.Close()
	blk, err := e.p.Alloc(4*testChunk, true)
	if err != nil {
		t.Fatal(err)
	}
	defer e.p.Free(blk)
	base := e.w.Stats()
	s, err := p.Get(d, e.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("socket gone")
	if err := s.Upload(blk.Ptr, 4*testChunk, func([]byte) error { return boom }); !errors.Is(err, boom) || s.Broken() {
		t.Fatalf("Upload failing in fill: %v, broken %v", err, s.Broken())
	}
	p.Put(s)
	if again, _ := p.Get(d, e.ctx, 0); again != s {
		t.Fatal("a Stager the caller's error ended was not reused")
	}
	d.armed = true
	err = s.Download(blk.Ptr, 4*testChunk, func([]byte) error { return nil })
	d.armed = false
	if !errors.Is(err, cuda.ErrIllegalAddress) || !s.Broken() {
		t.Fatalf("Download with a failing stream: %v, broken %v", err, s.Broken())
	}
	p.Put(s)
	if st := e.w.Stats(); st.LiveHost != base.LiveHost || st.Streams != base.Streams {
		t.Fatalf("a broken Stager put back kept %d pinned ranges and %d streams (before: %d, %d)",
			st.LiveHost, st.Streams, base.LiveHost, base.Streams)
	}
	fresh, err := p.Get(d, e.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fresh == s || fresh.Broken() {
		t.Fatal("Get gave out the broken Stager again")
	}
	p.Put(fresh)
}
