//go:build ibverbs

package ibverbs

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/backendtest"
	"github.com/rdmamgr/rdmamgr/buffer"
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
// completion (OpWrite).
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
		if op != backend.OpWrite {
			lats = append(lats, time.Since(t0))
		}
		if res := rec.Wait(b, waitTimeout); res.Err != nil {
			b.Fatal(res.Err)
		}
		if op == backend.OpWrite {
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
