//go:build linux

package queuepair_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// Real routes for the allocation test and the benchmarks: TCP on
// loopback and shm (with its TCP fallback) between two backends of this
// process.

func newTCP(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry) {
	t.Helper()
	reg := memreg.NewRegistry(owner, buffer.Limits{})
	b, err := wiring.NewBackend[*tcp.Backend](tcp.Config{ListenAddr: "127.0.0.1:0"}, reg, nil)
	if err != nil {
		t.Fatalf("tcp.New: %v", err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatalf("tcp Start: %v", err)
	}
	return b, reg
}

func newSHM(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry) {
	t.Helper()
	fb, reg := newTCP(t, owner)
	t.Cleanup(func() { fb.Close() })
	b, err := wiring.NewBackend[*shm.Backend](shm.Config{Fallback: fb}, reg, nil)
	if err != nil {
		t.Fatalf("shm.New: %v", err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatalf("shm Start: %v", err)
	}
	return b, reg
}

var routeKinds = []struct {
	name string
	make func(testing.TB, uint64) (backend.Backend, *memreg.Registry)
}{{"shm", newSHM}, {"tcp", newTCP}}

// routeEnv is a queue pair on a real route bound to a completion queue,
// with a local and a remote buffer of n bytes.
type routeEnv struct {
	qp            *queuepair.QueuePair
	cq            *queuepair.CompletionQueue
	local, remote buffer.Buffer
}

func newRouteEnv(t testing.TB, mk func(testing.TB, uint64) (backend.Backend, *memreg.Registry), n, cqCap int) *routeEnv {
	t.Helper()
	p := backendtest.NewPair(t, backendtest.Factory{NewBackend: mk, Timeout: time.Minute})
	cq := queuepair.NewCompletionQueue(cqCap)
	qp := backendtest.NewQueuePair(t, p.Route, p.RegA, p.A.Kind(), time.Minute, cq)
	la, _ := backendtest.Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	rb, _ := backendtest.Alloc(t, p.RegB, n, buffer.AccessReadWrite)
	return &routeEnv{qp: qp, cq: cq, local: la, remote: rb}
}

// PostOps of reused work requests and their reaping through the queue
// allocate nothing per operation in the queue pair, on shm and TCP routes
// (what a backend allocates per operation is counted too: the figure is
// the whole path's), with every operation signaled and with selective
// signaling (the chain's last signaled: the queue reports it alone).
func TestCQAllocsOnRoutes(t *testing.T) {
	if testing.Short() || queuepair.RaceEnabled {
		t.Skip("allocation count is not meaningful under -race")
	}
	for _, rk := range routeKinds {
		for _, sel := range []bool{false, true} {
			name := rk.name
			if sel {
				name += "/unsignaled"
			}
			t.Run(name, func(t *testing.T) { testCQAllocs(t, rk.make, sel) })
		}
	}
}

func testCQAllocs(t *testing.T, mk func(testing.TB, uint64) (backend.Backend, *memreg.Registry), sel bool) {
	e := newRouteEnv(t, mk, 64, 16)
	const chain = 8
	wrs := make([]*queuepair.WorkRequest, chain)
	ops := make([]queuepair.Op, chain)
	for i := range wrs {
		wrs[i] = new(queuepair.WorkRequest)
		ops[i] = queuepair.PutOp(e.local, e.remote)
		if i%2 == 1 {
			ops[i] = queuepair.GetOp(e.local, e.remote)
		}
		ops[i].Unsignaled = sel && i < chain-1
	}
	reports := chain
	if sel {
		reports = 1
	}
	out := make([]*queuepair.WorkRequest, chain)
	ctx := context.Background()
	run := func() {
		e.qp.PostOps(ctx, wrs, ops)
		for got := 0; got < reports; {
			n, err := e.cq.Wait(ctx, out[got:])
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range out[got : got+n] {
				if err := w.Err(); err != nil {
					t.Fatal(err)
				}
			}
			got += n
		}
	}
	for range 50 {
		run()
	}
	if sel {
		for _, w := range wrs {
			if done, err := w.Poll(); !done || err != nil {
				t.Fatalf("after the chain's signal: done %v, %v", done, err)
			}
		}
	}
	a := testing.AllocsPerRun(200, run) / chain
	t.Logf("%.3f allocations per operation (PostOps of %d + cq.Wait)", a, chain)
	if a != 0 {
		t.Fatalf("%.3f allocations per operation, want 0", a)
	}
}

// BenchmarkCQ drives 64 operations in flight through a completion queue
// (PostOps of reaped requests, cq.Wait) beside the per-operation form
// (PostPut, then Wait on each), in one run: compare their ns/op. cqget is
// cq with Gets; cqsel is cq with selective signaling, as perftest's
// --cq-mod 16 (chains of 16, the last of each signaled).
func BenchmarkCQ(b *testing.B) {
	const inFlight = 64
	for _, rk := range routeKinds {
		for _, size := range []int{8, 4 << 10} {
			for _, mode := range []string{"cq", "cqget", "cqsel", "wait"} {
				b.Run(fmt.Sprintf("%s/%dB/%s", rk.name, size, mode), func(b *testing.B) {
					e := newRouteEnv(b, rk.make, size*inFlight, inFlight)
					wrs := make([]*queuepair.WorkRequest, inFlight)
					ops := make([]queuepair.Op, inFlight)
					for i := range wrs {
						wrs[i] = new(queuepair.WorkRequest)
						l, _ := e.local.Slice(uint64(i*size), uint64(size))
						r, _ := e.remote.Slice(uint64(i*size), uint64(size))
						ops[i] = queuepair.PutOp(l, r)
						if mode == "cqget" {
							ops[i] = queuepair.GetOp(l, r)
						}
					}
					ctx := context.Background()
					b.SetBytes(int64(size))
					b.ReportAllocs()
					b.ResetTimer()
					switch mode {
					case "cq", "cqget":
						benchCQ(b, e, wrs, ops)
					case "cqsel":
						benchCQSel(b, e, wrs, ops, 16)
					default:
						benchWait(b, e, wrs, ops, ctx)
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
				})
			}
		}
	}
}

func benchCQ(b *testing.B, e *routeEnv, wrs []*queuepair.WorkRequest, ops []queuepair.Op) {
	ctx := context.Background()
	first := min(len(wrs), b.N)
	e.qp.PostOps(ctx, wrs[:first], ops[:first])
	posted, done := first, 0
	out := make([]*queuepair.WorkRequest, len(wrs))
	again := make([]*queuepair.WorkRequest, 0, len(wrs))
	againOps := make([]queuepair.Op, 0, len(wrs))
	for done < b.N {
		n, err := e.cq.Wait(ctx, out)
		if err != nil {
			b.Fatal(err)
		}
		again, againOps = again[:0], againOps[:0]
		for _, w := range out[:n] {
			if err := w.Err(); err != nil {
				b.Fatal(err)
			}
			done++
			if posted < b.N {
				again = append(again, w)
				againOps = append(againOps, ops[posted%len(ops)]) // any free request carries any op
				posted++
			}
		}
		if len(again) > 0 {
			e.qp.PostOps(ctx, again, againOps)
		}
	}
}

// benchCQSel keeps len(wrs) operations in flight as chains of every,
// each chain's last signaled: a reaped signal re-posts its chain.
func benchCQSel(b *testing.B, e *routeEnv, wrs []*queuepair.WorkRequest, ops []queuepair.Op, every int) {
	ctx := context.Background()
	for i := range ops {
		ops[i].Unsignaled = i%every != every-1
		ops[i].ID = uint64(i/every) + 1 // the chain
	}
	chains := len(wrs) / every
	posted, done := 0, 0
	for c := 0; c < chains && posted < b.N; c++ {
		e.qp.PostOps(ctx, wrs[c*every:(c+1)*every], ops[c*every:(c+1)*every])
		posted += every
	}
	out := make([]*queuepair.WorkRequest, len(wrs))
	for done < posted {
		n, err := e.cq.Wait(ctx, out)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range out[:n] {
			if err := w.Err(); err != nil {
				b.Fatal(err)
			}
			c := int(w.ID()) - 1
			done += every
			if posted < b.N {
				e.qp.PostOps(ctx, wrs[c*every:(c+1)*every], ops[c*every:(c+1)*every])
				posted += every
			}
		}
	}
}

func benchWait(b *testing.B, e *routeEnv, wrs []*queuepair.WorkRequest, ops []queuepair.Op, ctx context.Context) {
	e.qp.SetCompletionQueue(nil)
	for i := 0; i < b.N; i += len(wrs) {
		n := min(len(wrs), b.N-i)
		for j := range n {
			e.qp.PostPut(ctx, wrs[j], ops[j].Local, ops[j].Remote)
		}
		for j := range n {
			if err := wrs[j].Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}
