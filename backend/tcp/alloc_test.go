package tcp

import (
	"context"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend/backendtest"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// The steady-state data path allocates nothing per operation: a reused
// WorkRequest, a pooled op, batched writev on both sides.
func TestSteadyStateAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation count (sync.Pool drops items at random under -race)")
	}
	p := newPair(t, Config{}, Config{})
	qp := queuepair.New(1, backendtest.OwnerB, p.route, p.regA, qpbind.Options{})
	for _, size := range []int{64, 4096, 1 << 20} {
		local, _ := backendtest.Alloc(t, p.regA, size, buffer.AccessReadWrite)
		remote, _ := backendtest.Alloc(t, p.regB, size, buffer.AccessReadWrite)
		ctx := context.Background()
		var w queuepair.WorkRequest
		for _, op := range []string{"put", "get"} {
			run := func() {
				if op == "put" {
					qp.PostPut(&w, local, remote)
				} else {
					qp.PostGet(&w, local, remote)
				}
				if err := w.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for range 100 {
				run() // warm pools and maps
			}
			if a := testing.AllocsPerRun(500, run); a > 0.05 {
				t.Errorf("%s %d bytes: %.2f allocations per operation, want 0", op, size, a)
			} else {
				t.Logf("%s %d bytes: %.3f allocations per operation", op, size, a)
			}
		}
	}
}
