//go:build ibverbs

package ibverbs

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// Benchmarks of the verbs beyond Put and Get on the machine's device
// (Soft-RoCE in the VM: test/softroce/verbs-bench.sh runs them next to
// perftest's ib_atomic_bw and ib_send_lat). Figures only: nothing here
// asserts a time.

// benchConfig is DefaultConfig with Spin from RDMAMGR_IBV_SPIN (a
// duration), if set.
func benchConfig(b *testing.B) Config {
	cfg := DefaultConfig()
	if s := os.Getenv("RDMAMGR_IBV_SPIN"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("RDMAMGR_IBV_SPIN: %v", err)
		}
		cfg.Spin = d
	}
	return cfg
}

// BenchmarkVerbsFetchAdd: FetchAdd operations per second on one route
// with window operations in flight; the counter is checked exact.
func BenchmarkVerbsFetchAdd(b *testing.B) {
	requireDevices(b)
	for _, window := range []int{1, 16} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			a, _ := started(b, benchConfig(b), 1)
			o, regO := started(b, benchConfig(b), 2)
			rt := connect(b, a, o)
			h, mem := backendtest.Alloc(b, regO, 8, accessAtomicRW)
			counter := ownerWord(b, mem, 0)
			rec := backendtest.NewRecorder(window)
			post := func(wr *backend.WorkRequest) {
				wr.Reset()
				wr.Op, wr.Remote, wr.Swap, wr.Done = backend.OpFetchAdd, h, 1, rec
				wr.Deadline = time.Now().Add(waitTimeout)
				if err := rt.Post(wr); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			issued := 0
			for ; issued < min(window, b.N); issued++ {
				post(new(backend.WorkRequest))
			}
			for range b.N {
				res := rec.Wait(b, waitTimeout)
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				if issued < b.N {
					post(res.WR)
					issued++
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			if got := counter.Load(); got != uint64(b.N) {
				b.Fatalf("counter %d after %d FetchAdds", got, b.N)
			}
		})
	}
}

// BenchmarkVerbsPutWithImmEvent: the time from posting a PutWithImm to
// its event in the owner's inbox, one at a time (with Put's completion
// and Send-to-message as references).
func BenchmarkVerbsPutWithImmEvent(b *testing.B) {
	requireDevices(b)
	for _, size := range []int{8, 4096} {
		b.Run(fmt.Sprintf("put-imm-to-event/size=%d", size), func(b *testing.B) {
			latency(b, backend.OpWriteImm, size)
		})
		b.Run(fmt.Sprintf("put-to-completion/size=%d", size), func(b *testing.B) {
			latency(b, backend.OpWrite, size)
		})
		b.Run(fmt.Sprintf("send-to-message/size=%d", size), func(b *testing.B) {
			latency(b, backend.OpSend, size)
		})
	}
}

// latency runs b.N operations of op one at a time and reports the mean,
// p50 and p99 of post -> event (OpWriteImm), message (OpSend) or
// completion (OpWrite, OpRead).
func latency(b *testing.B, op backend.Op, size int) {
	a, regA := started(b, benchConfig(b), 1)
	o, regO := started(b, benchConfig(b), 2)
	in := newTestInbox(regO, 1, 1)
	o.SetInbox(in)
	rt := connect(b, a, o)
	ha, _ := backendtest.Alloc(b, regA, size, buffer.AccessReadWrite)
	ho, _ := backendtest.Alloc(b, regO, size, accessNotifyW)
	remote := ho
	if op == backend.OpSend {
		remote = buffer.Buffer{}
	}
	rec := backendtest.NewRecorder(1)
	wr, release := backendtest.NewWR(b, regA, op, ha, remote, time.Time{}, rec)
	defer release()
	local, region := wr.Local, wr.LocalRegion
	lats := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		if op == backend.OpSend {
			in.post(size)
		}
		wr.Reset()
		wr.Op, wr.Local, wr.LocalRegion, wr.Remote, wr.Done, wr.Imm = op, local, region, remote, rec, uint32(i)
		wr.Deadline = time.Now().Add(waitTimeout)
		t0 := time.Now()
		if err := rt.Post(wr); err != nil {
			b.Fatal(err)
		}
		switch op {
		case backend.OpWriteImm:
			in.nextEvent(b)
		case backend.OpSend:
			in.nextMsg(b)
		}
		if !oneSided(op) {
			lats = append(lats, time.Since(t0))
		}
		if res := rec.Wait(b, waitTimeout); res.Err != nil {
			b.Fatal(res.Err)
		}
		if oneSided(op) {
			lats = append(lats, time.Since(t0))
		}
	}
	b.StopTimer()
	slices.Sort(lats)
	var sum time.Duration
	for _, d := range lats {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(sum/time.Duration(len(lats))), "µs-mean")
	b.ReportMetric(us(lats[len(lats)/2]), "µs-p50")
	b.ReportMetric(us(lats[len(lats)*99/100]), "µs-p99")
}

func oneSided(op backend.Op) bool { return op == backend.OpWrite || op == backend.OpRead }

// BenchmarkVerbsLatency: post-to-completion of one Put or Get at a time,
// 8 and 64 bytes (next to perftest's ib_write_lat and ib_read_lat; the
// poller's spin, RDMAMGR_IBV_SPIN, decides whether it sleeps between).
func BenchmarkVerbsLatency(b *testing.B) {
	requireDevices(b)
	for _, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
		for _, size := range []int{8, 64} {
			b.Run(fmt.Sprintf("%s/size=%d", op, size), func(b *testing.B) { latency(b, op, size) })
		}
	}
}

// BenchmarkVerbsRate: 64-byte Puts per second on one route with window in
// flight, refilled by Post one at a time or by PostList with every
// completion reaped so far (next to perftest's ib_write_bw -s 64).
func BenchmarkVerbsRate(b *testing.B) {
	requireDevices(b)
	const window, size = 64, 64
	for _, list := range []bool{false, true} {
		b.Run(fmt.Sprintf("put/size=%d/window=%d/list=%v", size, window, list), func(b *testing.B) {
			a, regA := started(b, benchConfig(b), 1)
			o, regO := started(b, benchConfig(b), 2)
			rt := connect(b, a, o).(*route)
			ha, _ := backendtest.Alloc(b, regA, window*size, buffer.AccessReadWrite)
			ho, _ := backendtest.Alloc(b, regO, window*size, buffer.AccessReadWrite)
			rec := backendtest.NewRecorder(window)
			wrs := make([]*backend.WorkRequest, window)
			for i := range wrs {
				wr, release := backendtest.NewWR(b, regA, backend.OpWrite, backendtest.Slice(b, ha, i*size, size),
					backendtest.Slice(b, ho, i*size, size), time.Time{}, rec)
				defer release()
				wrs[i] = wr
			}
			post := func(ws []*backend.WorkRequest) {
				if list {
					if n, err := rt.PostList(ws); err != nil {
						b.Fatalf("PostList: %d, %v", n, err)
					}
					return
				}
				for _, wr := range ws {
					if err := rt.Post(wr); err != nil {
						b.Fatal(err)
					}
				}
			}
			d0 := rt.doorbells.Load()
			b.ResetTimer()
			issued := min(window, b.N)
			post(wrs[:issued])
			ready := make([]*backend.WorkRequest, 0, window)
			for done := 0; done < b.N; {
				res := rec.Wait(b, waitTimeout)
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				done++
				ready = append(ready[:0], res.WR)
				for more := true; more; {
					select {
					case r := <-rec.Results():
						if r.Err != nil {
							b.Fatal(r.Err)
						}
						done++
						ready = append(ready, r.WR)
					default:
						more = false
					}
				}
				k := min(len(ready), b.N-issued)
				post(ready[:k])
				issued += k
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			b.ReportMetric(float64(rt.doorbells.Load()-d0)/float64(b.N), "posts/op")
		})
	}
}
