package tcp

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// BenchmarkGetVsPingPong times an 8-byte Get's round trip, one at a time,
// against a plain ping-pong of 8-byte messages over loopback in the same
// process, in alternating windows of 1,000 round trips, and reports the
// median of each (ours-ns/op, plain-ns/op) and of the windows' ratios
// (ratio). Run on one CPU:
//
//	GOMAXPROCS=1 taskset -c 1 go test -run '^$' -bench GetVsPingPong -benchtime 200000x ./backend/tcp
//
// every step of both ends then runs in turn, so a window's time is their
// whole cost, and the machine's drift (which moves a run by 10% on a
// shared VM) falls on both sides of each ratio alike.
//
// Sub-benchmark drive posts each Get as Waited and waits through the
// route's Drive (drive.go: the waiter reads its own answer), as package
// queuepair's Wait does; reader waits for the reader goroutine's
// completion, as a poller does.
func BenchmarkGetVsPingPong(b *testing.B) {
	for _, drive := range []bool{true, false} {
		name := "reader"
		if drive {
			name = "drive"
		}
		b.Run(name, func(b *testing.B) { benchGetVsPingPong(b, drive) })
	}
}

func benchGetVsPingPong(b *testing.B, drive bool) {
	p := newPair(b, Config{}, Config{})
	_, local := backendtest.Alloc(b, p.regA, 8, buffer.AccessReadWrite)
	hr, _ := backendtest.Alloc(b, p.regB, 8, buffer.AccessReadWrite)
	done := make(chanCompleter, 1)
	wr := &backend.WorkRequest{Op: backend.OpRead, Local: local, Remote: hr, Done: done, Waited: drive}
	ctx := context.Background()
	ours := func(n int) time.Duration {
		t0 := time.Now()
		for range n {
			wr.Deadline = time.Now().Add(time.Minute)
			if err := p.route.Post(wr); err != nil {
				b.Fatal(err)
			}
			if drive {
				p.route.(backend.Driver).Drive(ctx, wr)
			}
			if res := <-done; res.Err != nil {
				b.Fatal(res.Err)
			}
		}
		return time.Since(t0)
	}
	c, s := loopbackPair(b)
	echoed := make(chan struct{})
	go func() {
		defer close(echoed)
		m := make([]byte, 8)
		for {
			if _, err := io.ReadFull(s, m); err != nil {
				return
			}
			if _, err := s.Write(m); err != nil {
				return
			}
		}
	}()
	msg := make([]byte, 8)
	plain := func(n int) time.Duration {
		t0 := time.Now()
		for range n {
			if _, err := c.Write(msg); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, msg); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	}
	alternate(b, 1000, ours, plain)
	c.Close()
	<-echoed
}

// alternate times ours and plain in alternating windows of window
// operations (b.N of each in all, after one untimed window of each) and
// reports the medians of their times per operation (ours-ns/op,
// plain-ns/op) and of the windows' ratios, ours over plain (ratio).
func alternate(b *testing.B, window int, ours, plain func(n int) time.Duration) {
	ours(window) // warm both
	plain(window)
	var o, q, r []float64
	b.ResetTimer()
	for left := b.N; left > 0; {
		n := min(window, left)
		left -= n
		oo := float64(ours(n)) / float64(n)
		pp := float64(plain(n)) / float64(n)
		o, q, r = append(o, oo), append(q, pp), append(r, oo/pp)
	}
	b.StopTimer()
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(o), "ours-ns/op")
	b.ReportMetric(median(q), "plain-ns/op")
	b.ReportMetric(median(r), "ratio")
}
