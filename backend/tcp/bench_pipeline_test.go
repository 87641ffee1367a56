package tcp

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/bench/baseline"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// reapDone collects completions for one reaping goroutine, as a
// completion queue does: the completer appends, and wakes the reaper only
// when it sleeps.
type reapDone struct {
	mu       sync.Mutex
	done     []*backend.WorkRequest
	errs     int
	sleeping bool
	wake     chan struct{}
}

func (d *reapDone) Complete(wr *backend.WorkRequest, err error) {
	d.mu.Lock()
	d.done = append(d.done, wr)
	if err != nil {
		d.errs++
	}
	if d.sleeping {
		d.sleeping = false
		d.wake <- struct{}{}
	}
	d.mu.Unlock()
}

// reap moves the completions into out (emptied first), waiting for one.
func (d *reapDone) reap(out []*backend.WorkRequest) ([]*backend.WorkRequest, int) {
	d.mu.Lock()
	for len(d.done) == 0 {
		d.sleeping = true
		d.mu.Unlock()
		<-d.wake
		d.mu.Lock()
	}
	out = append(out[:0], d.done...)
	d.done = d.done[:0]
	errs := d.errs
	d.errs = 0
	d.mu.Unlock()
	return out, errs
}

// BenchmarkPipeline64 is the 64-byte Put pipeline, 64 in flight on a
// route of 2 connections, posted one by one (post) and as lists of what
// completed (list) from one goroutine that reaps completions as a
// completion queue gives them, against a plain Go request/response
// pipeline over 2 connections (plain, bench/baseline) in the same process.
// Compare ns/op within one run, and cpu-ns/op (the process's CPU time,
// both ends, per operation: steadier than the wall clock on a busy
// machine).
func BenchmarkPipeline64(b *testing.B) {
	const depth, size = 64, 64
	b.Run("post", func(b *testing.B) { benchPipeline(b, depth, size, false) })
	b.Run("list", func(b *testing.B) { benchPipeline(b, depth, size, true) })
	b.Run("plain", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := baseline.NewServer(ln)
		defer srv.Close()
		b.ReportAllocs()
		b.ResetTimer()
		cpu := processCPU()
		if _, err := baseline.Pipeline(context.Background(), srv.Addr(), baseline.Load{Size: size, Count: b.N, Conns: 2, Depth: depth}); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	})
}

// pipelinePuts returns a loopback route's pair, its list poster, depth
// Puts of size bytes each to their own slots of the peer's region, and
// the completion collector they report to.
func pipelinePuts(b *testing.B, depth, size int) (*pair, backend.ListPoster, []*backend.WorkRequest, *reapDone) {
	p := newPair(b, Config{}, Config{})
	lp := p.route.(backend.ListPoster)
	_, local := backendtest.Alloc(b, p.regA, depth*size, buffer.AccessReadWrite)
	hr, _ := backendtest.Alloc(b, p.regB, depth*size, buffer.AccessReadWrite)
	done := &reapDone{wake: make(chan struct{}, 1)}
	wrs := make([]*backend.WorkRequest, depth)
	deadline := time.Now().Add(time.Hour)
	for i := range wrs {
		off := i * size
		wrs[i] = &backend.WorkRequest{Op: backend.OpWrite, Local: local[off : off+size], Remote: backendtest.Slice(b, hr, off, size), Done: done, Deadline: deadline}
	}
	return p, lp, wrs, done
}

func benchPipeline(b *testing.B, depth, size int, list bool) {
	p, lp, wrs, done := pipelinePuts(b, depth, size)
	post := func(ws []*backend.WorkRequest) {
		if list {
			if n, err := lp.PostList(ws); err != nil {
				b.Fatalf("post list: %d, %v", n, err)
			}
			return
		}
		for _, wr := range ws {
			if err := p.route.Post(wr); err != nil {
				b.Fatalf("post: %v", err)
			}
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	posted := min(b.N, depth)
	post(wrs[:posted])
	var got []*backend.WorkRequest
	for completed := 0; completed < b.N; {
		var errs int
		got, errs = done.reap(got)
		if errs > 0 {
			b.Fatalf("%d puts failed", errs)
		}
		completed += len(got)
		if k := min(len(got), b.N-posted); k > 0 {
			post(got[:k])
			posted += k
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	var writevs uint64
	for _, cc := range p.route.(*route).conns {
		writevs += cc.writevs.Load()
	}
	b.ReportMetric(float64(writevs)/float64(b.N), "writev/op")
}

// BenchmarkPipelineVsPlain is Pipeline64/list against Pipeline64/plain in
// alternating windows of 20,000 Puts in one process, and reports the
// medians of each (ours-ns/op, plain-ns/op) and of the windows' ratios
// of ours' time to the plain pipeline's (ratio: above 1, ours is slower).
// Run on one CPU, every step of both ends runs in turn, so a window's
// time is their whole CPU per operation:
//
//	GOMAXPROCS=1 taskset -c 1 go test -run '^$' -bench PipelineVsPlain -benchtime 400000x ./backend/tcp
func BenchmarkPipelineVsPlain(b *testing.B) {
	const depth, size, window = 64, 64, 20000
	_, lp, wrs, done := pipelinePuts(b, depth, size)
	ours := func(n int) time.Duration {
		t0 := time.Now()
		posted := min(n, depth)
		if k, err := lp.PostList(wrs[:posted]); err != nil {
			b.Fatalf("post list: %d, %v", k, err)
		}
		var got []*backend.WorkRequest
		for completed := 0; completed < n; {
			var errs int
			got, errs = done.reap(got)
			if errs > 0 {
				b.Fatalf("%d puts failed", errs)
			}
			completed += len(got)
			if k := min(len(got), n-posted); k > 0 {
				if m, err := lp.PostList(got[:k]); err != nil {
					b.Fatalf("post list: %d, %v", m, err)
				}
				posted += k
			}
		}
		return time.Since(t0)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := baseline.NewServer(ln)
	defer srv.Close()
	plain := func(n int) time.Duration {
		d, err := baseline.Pipeline(context.Background(), srv.Addr(), baseline.Load{Size: size, Count: n, Conns: 2, Depth: depth})
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	alternate(b, window, ours, plain)
}
