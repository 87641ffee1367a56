//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/cycles"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// qpBench is a queue pair on an shm route between two backends of this
// process (no manager): the path a program's Put and Get take.
type qpBench struct {
	qp            *queuepair.QueuePair
	local, remote buffer.Buffer
}

func newQPBench(b *testing.B, n int) *qpBench {
	a, regA := newBackend(b, backendtest.OwnerA, shm.Config{})
	backendtest.CloseAtCleanup(b, timeout, a, regA)
	o, regB := newBackend(b, backendtest.OwnerB, shm.Config{})
	backendtest.CloseAtCleanup(b, timeout, o, regB)
	rt := backendtest.MustConnect(b, timeout, a, o, backendtest.OwnerB, backendtest.OwnerA)
	q := &qpBench{}
	q.local, _ = backendtest.Alloc(b, regA, n, buffer.AccessReadWrite)
	q.remote, _ = backendtest.Alloc(b, regB, n, buffer.AccessReadWrite)
	q.qp = wiring.NewQueuePair(1, backendtest.OwnerB, rt, regA, qpbind.Options{Kind: backend.KindSHM}).(*queuepair.QueuePair)
	b.Cleanup(q.qp.Release)
	if err := q.qp.Put(context.Background(), q.local, q.remote).Wait(context.Background()); err != nil { // maps the region
		b.Fatal(err)
	}
	return q
}

// BenchmarkQueuePair is a program's Put or Get on an shm route through a
// queue pair, with a reused WorkRequest (PostPut/PostGet, then Wait):
// `depth` posted before the first is waited for. Its p50-ns metric is the
// median of each operation's post-to-Wait time at depth 1 (timed as the
// bench times it: internal/cycles), p50win-ns/op the median over windows
// of 256 operations of their time per operation and cpu-ns/op the process's CPU time per
// operation (figures robust to preemption, unlike ns/op).
// go test -run '^$' -bench QueuePair ./backend/shm
func BenchmarkQueuePair(b *testing.B) {
	const window = 256
	for _, n := range []int{8, 4096} {
		for _, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
			for _, depth := range []int{1, 16} {
				b.Run(fmt.Sprintf("%s/%d/depth%d", op, n, depth), func(b *testing.B) {
					q := newQPBench(b, n)
					ctx := context.Background()
					wrs := make([]queuepair.WorkRequest, depth)
					post := q.qp.PostPut
					if op == backend.OpRead {
						post = q.qp.PostGet
					}
					var lat, win []time.Duration
					if depth == 1 {
						lat = make([]time.Duration, 0, min(b.N, 1<<20))
					}
					win = make([]time.Duration, 0, b.N/window+1)
					clk := cycles.Calibrate() // as the bench times: internal/cycles
					b.SetBytes(int64(n))
					b.ReportAllocs()
					b.ResetTimer()
					cpu0 := cpuTime(b)
					w0, wn := time.Now(), 0
					for i := 0; i < b.N; i += depth {
						t0, timed := int64(0), lat != nil && len(lat) < cap(lat)
						if timed {
							t0 = clk.Now()
						}
						k := min(depth, b.N-i)
						for j := range k {
							post(ctx, &wrs[j], q.local, q.remote)
						}
						for j := range k {
							if err := wrs[j].Wait(ctx); err != nil {
								b.Fatal(err)
							}
						}
						if timed {
							lat = append(lat, clk.Since(t0))
						}
						if wn += k; wn >= window {
							now := time.Now()
							win = append(win, now.Sub(w0)/time.Duration(wn))
							w0, wn = now, 0
						}
					}
					b.StopTimer()
					b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
					if len(lat) > 0 {
						slices.Sort(lat)
						b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
					}
					if len(win) > 0 { // robust to the preemptions of a loaded machine
						slices.Sort(win)
						b.ReportMetric(float64(win[len(win)/2].Nanoseconds()), "p50win-ns/op")
					}
				})
			}
		}
	}
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
