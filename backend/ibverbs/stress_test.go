//go:build ibverbs

package ibverbs

import (
	"context"
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

var (
	stressOps      = flag.Int("cancel.ops", 10000, "TestCancelStress: operations to end by deadline or cancellation, at least")
	stressDuration = flag.Duration("cancel.duration", 4*time.Minute, "TestCancelStress: bound on its run time")
)

// TestCancelStress is issue 9's stress test on ibverbs, between two
// processes on one device (the child holds the remote buffer): the same
// body as test/TestCancelStress runs over TCP, on two queue pairs sharing
// one RC route. In CI's Soft-RoCE VM (TCG) it is bounded by -cancel.ops
// and -cancel.duration.
func TestCancelStress(t *testing.T) {
	requireDevices(t)
	const maxSize = 128 << 10
	a, regA := started(t, DefaultConfig(), 0xA)
	c := startChild(t, 0xB, backendtest.StressRemoteSize(maxSize))
	rt := connectChild(t, a, c)
	// The child's random bytes are the remote content gets are checked
	// against: fetch them once, checked against the child's sum.
	hd, ld := backendtest.Alloc(t, regA, backendtest.StressRemoteSize(maxSize), buffer.AccessReadWrite)
	if err := backendtest.Do(t, waitTimeout, rt, regA, backend.OpRead, hd, c.buf); err != nil {
		t.Fatalf("get the child's buffer: %v", err)
	}
	if got, want := sumHex(ld), c.call(childMsg{Cmd: "sum"}).Sum; got != want {
		t.Fatalf("child's buffer: sha256 %s, child says %s", got, want)
	}
	hl, ll := backendtest.Alloc(t, regA, backendtest.StressLocalSize(maxSize), buffer.AccessReadWrite)
	var qps []*queuepair.QueuePair
	for id := range uint64(2) {
		qp := wiring.NewQueuePair(id+1, c.buf.OwnerID, rt, regA, qpbind.Options{Timeout: waitTimeout, Kind: backend.KindIBVerbs}).(*queuepair.QueuePair)
		t.Cleanup(qp.Release)
		qps = append(qps, qp)
	}
	rep := backendtest.CancelStress(t, backendtest.StressEnv{
		QPs: qps, Remote: c.buf, RemoteData: ld, Local: hl, LocalMem: ll,
		MaxSize: maxSize, Victims: *stressOps, Duration: *stressDuration, Timeout: waitTimeout, Seed: rand.Uint64(),
	})
	t.Logf("cancel stress over ibverbs between two processes: %s", rep)
	if rep.Ended < *stressOps && !t.Failed() {
		t.Errorf("only %d operations ended early within %v (want %d)", rep.Ended, *stressDuration, *stressOps)
	}
	if err := rt.Err(); err != nil {
		t.Fatalf("route failed: %v", err)
	}
	for _, qp := range qps {
		qp.Release()
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_ = regA.Release(ctx, hl)
	_ = regA.Release(ctx, hd)
}
