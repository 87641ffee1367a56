package gpu

import (
	"context"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/cuda/cudafake"
	"github.com/rdmamgr/rdmamgr/node"
)

// TestMoveAllWithStandIn runs TestGPUAcrossProcesses's moves between two
// nodes of this process, each with a process of the driver stand-in, so
// the GPU check itself is proven wherever the suite runs (its real run
// needs a GPU).
func TestMoveAllWithStandIn(t *testing.T) {
	for _, kind := range []string{"shm", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			k, err := node.ParseBackend(kind)
			if err != nil {
				t.Fatal(err)
			}
			w := cudafake.NewWorld(cudafake.Config{DeviceMemory: 256 << 20})
			da, db := w.Process(), w.Process()
			t.Cleanup(func() { da.Close(); db.Close() })
			start := func(d *cudafake.Driver) *node.Node {
				n, err := node.Start(ctx, node.Config{Listen: "127.0.0.1:0", Backend: k, CUDA: node.CUDAConfig{Driver: d}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { n.Close() })
				return n
			}
			me, peer := start(da), start(db)
			for _, size := range []uint64{4096, 1<<20 + 17, 8 << 20} {
				moveAll(t, ctx, me, peer.Addr(), size)
			}
		})
	}
}
