package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/internal/testscale"
	"github.com/rdmamgr/rdmamgr/node"
)

// twoNodes starts two nodes of kind in this process; the first's manager
// benches against the second's.
func twoNodes(t *testing.T, ctx context.Context, kind backend.Kind) (*node.Node, *node.Node) {
	t.Helper()
	var ns [2]*node.Node
	for i := range ns {
		// A peer silent for 4 s fails a TCP route: under -race on a loaded
		// machine a process can stall that long, so scale it.
		n, err := node.Start(ctx, node.Config{Backend: kind, TCP: tcp.Config{PeerTimeout: testscale.Timeout(4 * time.Second)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := n.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		ns[i] = n
	}
	return ns[0], ns[1]
}

// The ring (bench --inflight) through a completion queue: every operation
// done and every byte checked, at 8 B and 4 KiB, put and get, on TCP and
// shm, every operation signaled and with selective signaling (bench
// --signal-every 4: a reaped signal vouches for the slots before it).
func TestRingThroughCompletionQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, kind := range []backend.Kind{backend.KindTCP, backend.KindSHM} {
		a, b := twoNodes(t, ctx, kind)
		peer := a.ClientOf(b.Addr(), "")
		for _, size := range []uint64{8, 4096} {
			for _, op := range []string{"put", "get"} {
				every := 0
				if size == 8 {
					every = 4
				}
				cfg := Config{Op: op, Size: size, Count: 300, Concurrency: 16, Ring: true, Warmup: 20, Verify: true, SignalEvery: every}
				res, err := Run(ctx, a.Manager(), peer, cfg)
				if err != nil {
					if errors.Is(err, rdmamgr.ErrNotSupported) {
						t.Skipf("%s: %v", kind, err)
					}
					t.Fatalf("%s %s %d: %v", kind, op, size, err)
				}
				if res.Stop != nil || res.Ops != 300 || res.Verified != 300*size || res.Mismatch != 0 || res.Errs != 0 ||
					len(res.Lat) != 300 || res.Backend != string(kind) {
					t.Errorf("%s %s %d: %+v (first error %v)", kind, op, size, res, res.FirstErr)
				}
			}
		}
	}
}

// A ring stopped by its context returns, says why, and leaves nothing in
// flight: the queue pair and buffers are given back without error.
func TestRingStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := twoNodes(t, ctx, backend.KindTCP)
	rctx, stop := context.WithCancel(ctx)
	cfg := Config{Op: "put", Size: 64, Count: 1 << 30, Concurrency: 32, Ring: true,
		Progress: func(ops, _ uint64, _ time.Duration) {
			if ops > 0 {
				stop()
			}
		}, ProgressEvery: 20 * time.Millisecond}
	res, err := Run(rctx, a.Manager(), a.ClientOf(b.Addr(), ""), cfg)
	if err != nil || !errors.Is(res.Stop, context.Canceled) || res.Ops == 0 || res.Errs != 0 {
		t.Fatalf("Run: %+v, %v", res, err)
	}
}
