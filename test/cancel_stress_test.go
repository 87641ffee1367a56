//go:build linux

package test

import (
	"context"
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/testscale"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

var (
	cancelOps      = flag.Int("cancel.ops", 0, "TestCancelStress: operations to end by deadline or cancellation, at least (0: 10000, 1000 under -race)")
	cancelDuration = flag.Duration("cancel.duration", 3*time.Minute, "TestCancelStress: bound on its run time")
)

// TestCancelStress is issue 9's stress test across processes on the TCP
// backend: operations to a daemon are ended by deadlines and cancellations
// at random points of their life, their memory is reused the moment Wait
// reports, and watched for a round more; neighbours on two queue pairs to
// the same daemon must all succeed. The race detector slows each operation
// several times: under -race the default is 1,000 operations, which keeps
// every way to end one well covered (CI also runs it without -race, with
// 10,000). Long run:
//
//	go test -count=1 -timeout 2h -run TestCancelStress -v ./test -args -cancel.ops=1000000 -cancel.duration=1h
func TestCancelStress(t *testing.T) { cancelStress(t, false) }

// TestCancelStressCQ is TestCancelStress with both queue pairs reporting
// into one completion queue: each victim's outcome is taken from the
// queue's report (reaped by another goroutine), cancelled by its ctx, and
// its memory is reused the moment the queue hands it over; 0 stale bytes.
// A fifth of TestCancelStress's operations by default (-cancel.ops sets
// both).
func TestCancelStressCQ(t *testing.T) { cancelStress(t, true) }

func cancelStress(t *testing.T, viaCQ bool) {
	const maxSize = 512 << 10
	ops := *cancelOps
	if ops == 0 {
		ops = 10000
		if testscale.Race {
			ops = 1000
		}
		if viaCQ {
			ops /= 5
		}
	}
	checkLocalClean(t)
	d := startDaemons(t, 1)[0]
	r := newRand(t)
	src, srcMem := localBuffer(t, uint64(backendtest.StressRemoteSize(maxSize)))
	fill(r, srcMem)
	remote := remoteBuffer(t, d, uint64(backendtest.StressRemoteSize(maxSize)), buffer.AccessReadWrite)
	seed := queuePair(t, d)
	if err := wait(seed.Put(context.Background(), src, remote)); err != nil {
		t.Fatalf("seed the daemon's buffer: %v", err)
	}
	lb, lmem := localBuffer(t, uint64(backendtest.StressLocalSize(maxSize)))
	env := backendtest.StressEnv{
		QPs:        []*queuepair.QueuePair{seed, queuePair(t, d)},
		Remote:     remote,
		RemoteData: srcMem,
		Local:      lb,
		LocalMem:   lmem,
		MaxSize:    maxSize,
		Victims:    ops,
		Duration:   *cancelDuration,
		Timeout:    time.Minute,
		Seed:       rand.Uint64(),
	}
	how := "Wait"
	if viaCQ {
		env.CQ = queuepair.NewCompletionQueue(256)
		for _, qp := range env.QPs {
			qp.SetCompletionQueue(env.CQ)
		}
		how = "a completion queue"
	}
	rep := backendtest.CancelStress(t, env)
	t.Logf("cancel stress over TCP to a daemon process, reported by %s: %s", how, rep)
	if rep.Ended < ops && !t.Failed() {
		t.Errorf("only %d operations ended early within %v (want %d)", rep.Ended, *cancelDuration, ops)
	}
}
