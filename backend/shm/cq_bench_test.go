//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// sink keeps the bare copies of BenchmarkCQ from being optimised away.
var sink byte

// BenchmarkCQ is the verbs-style loop of `rdmamgr bench --inflight 64` on
// an shm route, in one process: 64 operations in flight, posted as one
// chain (PostOps) into reused work requests, reaped in batches from a
// completion queue (Poll) and re-posted as the next chain. ns/op is the
// whole post-to-completion path of one operation, and p10-ns/op the same
// over the 10th percentile window of 4096 operations (robust to the
// preemptions of a loaded machine); copy-ns/op is a bare copy of the same
// size between the same two buffers, timed the same way in the same run
// (its 10th percentile window; a window after every 8th of operations,
// which ns/op includes), and x-copy is p10-ns/op over copy-ns/op
// (must-have 2 of issue 25: "within a small multiple of the copy").
// cpu-ns/op is the process's CPU time per operation.
// CQ/prepared/... posts the same chains through a queuepair.Chain
// (PrepareOps once, then Chain.Post of each run that completed in order).
// CQ_INFLIGHT=N sets the operations in flight (default 64); CQ_SAMESLOT=1
// puts them all on the same bytes, as ucx_perftest does (bench
// --shared-slot).
// go test -run '^$' -bench CQ ./backend/shm
func BenchmarkCQ(b *testing.B) {
	const window = 4096
	inflight := benchInflight()
	for _, mode := range []string{"", "prepared/"} {
		for _, n := range []int{8, 4096} {
			for _, op := range []backend.Op{backend.OpWrite, backend.OpRead} {
				b.Run(fmt.Sprintf("%s%s/%d", mode, op, n), func(b *testing.B) {
					a, regA := newBackend(b, backendtest.OwnerA, shmConfig())
					backendtest.CloseAtCleanup(b, timeout, a, regA)
					o, regB := newBackend(b, backendtest.OwnerB, shmConfig())
					backendtest.CloseAtCleanup(b, timeout, o, regB)
					rt := backendtest.MustConnect(b, timeout, a, o, backendtest.OwnerB, backendtest.OwnerA)
					ha, la := backendtest.Alloc(b, regA, n*inflight, buffer.AccessReadWrite)
					hb, lb := backendtest.Alloc(b, regB, n*inflight, buffer.AccessReadWrite)
					cq := queuepair.NewCompletionQueue(inflight)
					qp := backendtest.NewQueuePair(b, rt, regA, backend.KindSHM, time.Hour, cq)
					ctx := context.Background()
					if err := qp.Put(ctx, ha, hb).Wait(ctx); err != nil { // maps the region
						b.Fatal(err)
					}
					backendtest.Reap(b, cq, 1, timeout, nil)
					wrs := make([]queuepair.WorkRequest, inflight)
					ops := make([]queuepair.Op, inflight)
					for i := range wrs {
						at := i * n
						if os.Getenv("CQ_SAMESLOT") != "" {
							at = 0
						}
						l, r := backendtest.Slice(b, ha, at, n), backendtest.Slice(b, hb, at, n)
						if op == backend.OpRead {
							ops[i] = queuepair.GetOp(l, r)
						} else {
							ops[i] = queuepair.PutOp(l, r)
						}
						ops[i].ID = uint64(i)
					}
					chain := make([]*queuepair.WorkRequest, 0, inflight)
					next := make([]queuepair.Op, 0, inflight)
					var pc *queuepair.Chain
					if mode != "" {
						all := make([]*queuepair.WorkRequest, inflight)
						for i := range wrs {
							all[i] = &wrs[i]
						}
						pc = qp.PrepareOps(all, ops)
					}
					out := make([]*queuepair.WorkRequest, inflight)

					// The bare copy of n bytes between the same slots, a window
					// of it after every 8th window of operations: both sampled
					// under the same load.
					dst, src := lb, la
					if op == backend.OpRead {
						dst, src = la, lb
					}
					var copyWin []time.Duration

					var win []time.Duration
					if b.N >= 10*window {
						win = make([]time.Duration, 0, b.N/window+1)
					}
					b.SetBytes(int64(n))
					b.ReportAllocs()
					b.ResetTimer()
					posted, done, mark := 0, 0, window
					cpu0 := cpuTime(b)
					w0 := time.Now()
					for i := range min(inflight, b.N) {
						chain = append(chain, &wrs[i])
						next = append(next, ops[i])
					}
					posted += len(chain)
					if pc != nil {
						pc.Post(ctx, 0, len(chain))
					} else {
						qp.PostOps(ctx, chain, next)
					}
					for done < b.N {
						k := cq.Poll(out)
						chain, next = chain[:0], next[:0]
						for _, w := range out[:k] {
							if err := w.Err(); err != nil {
								b.Fatal(err)
							}
							done++
							if posted < b.N {
								chain = append(chain, w)
								posted++
							}
						}
						if len(chain) > 0 {
							postAgain(ctx, qp, pc, wrs, ops, chain, next)
						}
						if win != nil && done >= mark {
							now := time.Now()
							win = append(win, now.Sub(w0))
							if len(win)%8 == 0 {
								copyWin = append(copyWin, bareCopy(window, n, inflight, dst, src))
								now = time.Now()
							}
							w0, mark = now, done+window
						}
					}
					b.StopTimer()
					b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
					if len(copyWin) > 0 {
						p10, copyNs := p10PerOp(win, window), p10PerOp(copyWin, window)
						b.ReportMetric(p10, "p10-ns/op")
						b.ReportMetric(copyNs, "copy-ns/op")
						b.ReportMetric(p10/copyNs, "x-copy")
					}
				})
			}
		}
	}
}

// postAgain re-posts the reaped chain, each request with the operation
// its ID names. A verbs program keeps its work requests and their
// operations in arrays and re-posts a run of them that completed in order
// as it is, without building a chain (PostOps takes slices of both): so
// does this when chain is wrs[lo:hi] in order (through pc, when not nil:
// the chain of wrs and ops, prepared); otherwise it gathers the
// operations into next.
func postAgain(ctx context.Context, qp *queuepair.QueuePair, pc *queuepair.Chain, wrs []queuepair.WorkRequest, ops []queuepair.Op, chain []*queuepair.WorkRequest, next []queuepair.Op) {
	lo := int(chain[0].ID())
	inOrder := lo+len(chain) <= len(wrs)
	for j := 0; inOrder && j < len(chain); j++ {
		inOrder = chain[j] == &wrs[lo+j]
	}
	if inOrder && pc != nil {
		pc.Post(ctx, lo, lo+len(chain))
		return
	}
	if inOrder {
		qp.PostOps(ctx, chain, ops[lo:lo+len(chain)])
		return
	}
	for _, w := range chain {
		next = append(next, ops[w.ID()])
	}
	qp.PostOps(ctx, chain, next)
}

// bareCopy times count copies of n bytes from the slots of src to those
// of dst.
func bareCopy(count, n, slots int, dst, src []byte) time.Duration {
	t0 := time.Now()
	for i := range count {
		off := (i % slots) * n
		copy(dst[off:off+n], src[off:off+n])
	}
	d := time.Since(t0)
	sink += dst[0]
	return d
}

// p10PerOp is the 10th percentile of windows of ops operations each, in
// ns per operation.
func p10PerOp(win []time.Duration, ops int) float64 {
	slices.Sort(win)
	return float64(win[len(win)/10].Nanoseconds()) / float64(ops)
}

func benchInflight() int {
	if s := os.Getenv("CQ_INFLIGHT"); s != "" {
		n, _ := strconv.Atoi(s)
		return n
	}
	return 64
}
