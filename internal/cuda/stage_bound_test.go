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
