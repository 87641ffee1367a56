//go:build linux

package agent

import (
	"bytes"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// A poster writes its packet itself, but never waits on the attach
// socket: with the agent not reading (its socket's buffer fills after a
// few hundred single-post packets), every Post still returns (the writer
// goroutine takes over the packets the socket did not take, the rest
// batch up), and once the agent reads again every operation completes,
// in order, every byte checked.
func TestPostNeverWaitsOnTheSocket(t *testing.T) {
	x := newPair(t)
	r := x.route(t)
	const n = 400 // > what the socket's buffer takes one packet each; < a batch
	src, smem := backendtest.Alloc(t, x.p1.reg, n*8, buffer.AccessReadWrite)
	dst, dmem := backendtest.Alloc(t, x.p2.reg, n*8, buffer.AccessReadWrite)
	backendtest.Random(t, smem)
	rec := backendtest.NewRecorder(n)
	wrs := make([]*backend.WorkRequest, n)
	for i := range n {
		wr, release := backendtest.NewWR(t, x.p1.reg, backend.OpWrite, backendtest.Slice(t, src, i*8, 8), backendtest.Slice(t, dst, i*8, 8), time.Time{}, rec)
		defer release()
		wrs[i] = wr
	}
	stall := make(chan struct{})
	x.a.mu.Lock()
	x.a.stall = stall
	x.a.mu.Unlock()
	posted := make(chan error, 1)
	go func() {
		for _, wr := range wrs {
			if err := r.Post(wr); err != nil {
				posted <- err
				return
			}
		}
		posted <- nil
	}()
	select {
	case err := <-posted:
		if err != nil {
			t.Fatalf("Post: %v", err)
		}
	case <-time.After(wait):
		x.a.mu.Lock()
		x.a.stall = nil // kill must not close it again
		x.a.mu.Unlock()
		close(stall)
		t.Fatal("Post waited on a socket the agent does not read")
	}
	a := x.p1.waitAttached(t)
	a.mu.Lock()
	stuck := a.writing || a.posts.Count() > 0 // the writer holds the token, or records wait
	a.mu.Unlock()
	if !stuck {
		t.Error("the socket took every packet: the test did not fill it")
	}
	x.a.mu.Lock()
	x.a.stall = nil
	x.a.mu.Unlock()
	close(stall)
	for i := range n {
		res := rec.Wait(t, wait)
		if res.Err != nil {
			t.Fatalf("Put %d: %v", i, res.Err)
		}
	}
	if !bytes.Equal(dmem, smem) {
		t.Fatal("bytes differ")
	}
}

// An agent route says its completions are slow (backend.SlowCompleter):
// queue pairs on it park their waits at once instead of spinning.
func TestRouteSaysSlowCompletions(t *testing.T) {
	x := newPair(t)
	r := x.route(t)
	if s, ok := r.(backend.SlowCompleter); !ok || !s.SlowCompletions() {
		t.Fatalf("agent route %T: SlowCompleter %v", r, ok)
	}
}
