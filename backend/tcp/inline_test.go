package tcp

import (
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// inlined is the number of frames the route's posters wrote themselves.
func inlined(rt backend.Route) uint64 {
	var n uint64
	for _, cc := range rt.(*route).conns {
		n += cc.inlined.Load()
	}
	return n
}

// TestInlineWrite: an operation alone in flight is written by its poster
// (no hand-off to the writer goroutine); a large one, or one posted while
// others are in flight, goes through the writer goroutine; every byte lands
// either way.
func TestInlineWrite(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	rt := p.newRoute(t)
	h, mem := backendtest.Alloc(t, p.regB, 2*inlineMax, buffer.AccessReadWrite)
	_, local := backendtest.Alloc(t, p.regA, 2*inlineMax, buffer.AccessReadWrite)

	for i := range 10 {
		backendtest.Random(t, local[:100])
		small, _ := h.Slice(0, 100)
		if err := do(t, rt, backend.OpWrite, local[:100], small); err != nil {
			t.Fatal(err)
		}
		backendtest.AssertSame(t, "small write", mem[:100], local[:100])
		if got := inlined(rt); got != uint64(i+1) {
			t.Fatalf("after %d one-at-a-time writes %d were written by their poster, want all", i+1, got)
		}
	}
	before := inlined(rt)
	backendtest.Random(t, local)
	if err := do(t, rt, backend.OpWrite, local, h); err != nil {
		t.Fatal(err)
	}
	backendtest.AssertSame(t, "large write", mem, local)
	if got := inlined(rt); got != before {
		t.Fatalf("a %d-byte write was written by its poster, want the writer goroutine", len(local))
	}
}

// TestPostListWrittenByPoster: a chain posted by PostList while nobody
// writes the connection is written by its poster, every frame of it (no
// hand-off to the writer goroutine), and every byte lands. It failed
// before (only an operation alone in flight was written by its poster: a
// chain always went to the writer goroutine).
func TestPostListWrittenByPoster(t *testing.T) {
	p := newPair(t, Config{ConnsPerRoute: 1}, Config{})
	rt := p.newRoute(t)
	lp := rt.(backend.ListPoster)
	const n, size = 8, 64
	h, mem := backendtest.Alloc(t, p.regB, n*size, buffer.AccessReadWrite)
	_, local := backendtest.Alloc(t, p.regA, n*size, buffer.AccessReadWrite)
	backendtest.Random(t, local)
	rec := backendtest.NewRecorder(n)
	wrs := make([]*backend.WorkRequest, n)
	for i := range wrs {
		wrs[i] = &backend.WorkRequest{Op: backend.OpWrite, Local: local[i*size : (i+1)*size],
			Remote: backendtest.Slice(t, h, i*size, size), Deadline: time.Now().Add(waitTimeout), Done: rec}
	}
	before := inlined(rt)
	if k, err := lp.PostList(wrs); k != n || err != nil {
		t.Fatalf("PostList = %d, %v", k, err)
	}
	for range n {
		if res := rec.Wait(t, waitTimeout); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	backendtest.AssertSame(t, "chain of writes", mem, local)
	if got := inlined(rt) - before; got != n {
		t.Fatalf("%d of the chain's %d frames were written by their poster, want all", got, n)
	}
}

// TestPosterDoesNotWaitForAStalledPeer: lists of WRITEs posted to a peer
// that reads nothing return from PostList (their frames go to the writer
// goroutine once more than inlineMax is written and unanswered), though
// the socket buffers fill. It failed before the bound (the poster wrote
// each list itself and blocked in writev once the buffers were full).
func TestPosterDoesNotWaitForAStalledPeer(t *testing.T) {
	f := newFakeServer(t)
	cfg := fastWatchdog()
	cfg.MaxInFlight = 4096
	a, regA := newBackend(t, cfg, backendtest.OwnerA)
	rt := f.connect(t, a)
	_ = f.accept(t) // and never read
	lp := rt.(backend.ListPoster)
	const size, perList, lists = 16 << 10, 3, 1000 // 48 MiB in all: more than the socket buffers hold
	_, local := backendtest.Alloc(t, regA, size, buffer.AccessReadWrite)
	rec := backendtest.NewRecorder(perList * lists)
	done := make(chan error, 1)
	go func() {
		for range lists {
			wrs := make([]*backend.WorkRequest, perList)
			for i := range wrs {
				wrs[i] = &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(size),
					Deadline: time.Now().Add(time.Hour), Done: rec}
			}
			if _, err := lp.PostList(wrs); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("PostList: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("PostList waited on a peer that reads nothing")
	}
	if got := inlined(rt); got*size > 2*inlineMax {
		t.Fatalf("posters wrote %d frames of %d bytes themselves to a peer that reads nothing", got, size)
	}
}
