package memreg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// TestConcurrentAcquireRelease races readers against Release: every
// AcquireRemote that succeeds must have its memory valid until the Ref's
// Release, and none may succeed once Release has returned.
func TestConcurrentAcquireRelease(t *testing.T) {
	const workers = 16
	for round := 0; round < 20; round++ {
		concurrentAcquireRelease(t, workers)
	}
}

func concurrentAcquireRelease(t *testing.T, workers int) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	var released atomic.Bool
	var wg sync.WaitGroup
	var succeeded atomic.Int64
	start := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop) // ends the workers if the test fails early
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			<-start
			after := 0 // attempts made after Release returned
			for i := 0; ; i++ {
				wasReleased := released.Load()
				off := uint64((w*64 + i) % 4000)
				ref, err := g.AcquireRemote(b.Region, b.Key, off, 64, buffer.AccessWrite)
				if err != nil {
					if !errors.Is(err, rdmamgr.ErrReleased) {
						t.Errorf("AcquireRemote: %v", err)
						return
					}
				} else {
					if released.Load() {
						t.Errorf("AcquireRemote succeeded after Release returned")
					}
					mem := ref.Bytes()
					for j := range mem {
						mem[j] = byte(w) // memory must still be mapped
					}
					succeeded.Add(1)
					ref.Release()
				}
				if wasReleased {
					if err == nil {
						t.Errorf("AcquireRemote succeeded after Release returned")
					}
					after++
					if after >= 10 {
						return
					}
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}(w)
	}
	close(start)
	// Let workers get going before releasing.
	eventually(t, "workers acquire", func() bool { return succeeded.Load() >= int64(workers) })
	if err := g.Release(context.Background(), b); err != nil {
		t.Fatalf("Release: %v", err)
	}
	released.Store(true)
	wg.Wait()
	if st := g.Stats(); !idle(st) {
		t.Fatalf("Stats after Release %+v", st)
	}
}

// TestConcurrentRegistry exercises allocation, use and release from many
// goroutines at once under the race detector.
func TestConcurrentRegistry(t *testing.T) {
	g := newReg(t, buffer.Limits{MaxRegions: 1000})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				var b buffer.Buffer
				var err error
				if i%3 == 0 {
					b, err = g.Register(make([]byte, 100), buffer.AccessReadWrite)
				} else {
					b, err = g.Allocate(uint64(100+i), buffer.AccessReadWrite)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mem, err := g.Bytes(b)
				if err != nil {
					t.Error(err)
					return
				}
				msg := fmt.Sprintf("w%d-%d", w, i)
				copy(mem, msg)
				_ = g.Stats()
				_ = g.Regions()
				ref, err := g.AcquireLocal(b)
				if err != nil || string(ref.Bytes()[:len(msg)]) != msg {
					t.Errorf("AcquireLocal: %v %q", err, ref.Bytes())
					return
				}
				ref.Release()
				if err := g.Release(context.Background(), b); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if st := g.Stats(); !idle(st) {
		t.Errorf("Stats %+v", st)
	}
}
