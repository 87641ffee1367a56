package bench

import (
	"context"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	"github.com/rdmamgr/rdmamgr/node"
)

// TestRunDeviceMemory: bench with Memory a CUDA device's (the stand-in
// here) moves GPU buffers at both ends over TCP: the local one staged by
// the queue pair, the peer's by its owner; every operation done, as a
// ring and as goroutines, put and get, at a size across the 256 KiB
// staging chunks.
func TestRunDeviceMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, ns := deviceNodes(ctx, t)
	peer := ns[0].ClientOf(ns[1].Addr(), "")
	const size = 600 << 10
	for _, ring := range []bool{false, true} {
		for _, op := range []string{"put", "get"} {
			before := w.Stats()
			cfg := Config{Op: op, Size: size, Count: 20, Concurrency: 4, Ring: ring, Warmup: 2, Memory: buffer.CUDA(0)}
			res, err := Run(ctx, ns[0].Manager(), peer, cfg)
			if err != nil {
				t.Fatalf("%s ring=%v: %v", op, ring, err)
			}
			if res.Stop != nil || res.Ops != 20 || res.Errs != 0 || res.Bytes != 20*size {
				t.Fatalf("%s ring=%v: %+v (first error %v)", op, ring, res, res.FirstErr)
			}
			st := w.Stats()
			// Each operation is copied at both ends: 3 chunks each.
			if moved := st.BytesCopied - before.BytesCopied; moved < 2*22*size {
				t.Fatalf("%s ring=%v: %d bytes copied to and from device memory, want at least %d", op, ring, moved, 2*22*size)
			}
			if st.PageableCopies != 0 || st.FailedCopies != 0 {
				t.Fatalf("device copies %+v", st)
			}
		}
	}
}

// TestRunPeerMemory: with PeerMemory another Location than Memory, one
// end's buffer is in device memory and the other's in host memory (GPU to
// host and host to GPU): every operation done, and only one end copies to
// or from the device (each operation's bytes once, not twice).
func TestRunPeerMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, ns := deviceNodes(ctx, t)
	peer := ns[0].ClientOf(ns[1].Addr(), "")
	const size, count, warmup = 600 << 10, 10, 2
	host, dev := buffer.Host, buffer.CUDA(0)
	for _, c := range []struct{ local, remote buffer.Location }{{dev, host}, {host, dev}} {
		for _, op := range []string{"put", "get"} {
			before := w.Stats()
			remote := c.remote
			cfg := Config{Op: op, Size: size, Count: count, Concurrency: 2, Warmup: warmup, Memory: c.local, PeerMemory: &remote}
			res, err := Run(ctx, ns[0].Manager(), peer, cfg)
			if err != nil {
				t.Fatalf("%v to %v %s: %v", c.local, c.remote, op, err)
			}
			if res.Stop != nil || res.Ops != count || res.Errs != 0 {
				t.Fatalf("%v to %v %s: %+v (first error %v)", c.local, c.remote, op, res, res.FirstErr)
			}
			moved := w.Stats().BytesCopied - before.BytesCopied
			if want := uint64((count + warmup) * size); moved < want || moved >= 2*want {
				t.Fatalf("%v to %v %s: %d bytes copied to and from device memory, want one end's %d", c.local, c.remote, op, moved, want)
			}
		}
	}
}

// deviceNodes starts two TCP nodes, each a process of one fake CUDA host.
func deviceNodes(ctx context.Context, t *testing.T) (*cudafake.World, [2]*node.Node) {
	t.Helper()
	w := cudafake.NewWorld(cudafake.Config{DeviceMemory: 256 << 20})
	var ns [2]*node.Node
	for i := range ns {
		d := w.Process()
		n, err := node.Start(ctx, node.Config{Backend: backend.KindTCP, CUDA: node.CUDAConfig{Driver: d}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := n.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			d.Close()
		})
		ns[i] = n
	}
	return w, ns
}
