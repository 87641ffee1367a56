//go:build linux

package agent_test

import (
	"context"
	"flag"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	"github.com/rdmamgr/rdmamgr/internal/testscale"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	"github.com/rdmamgr/rdmamgr/node"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

var (
	stressOps      = flag.Int("cancel.ops", 0, "TestCancelStressThroughAgents: operations to end by deadline or cancellation, at least (0: 4000, 1000 under -race; a fifth of it for the CQ variant)")
	stressDuration = flag.Duration("cancel.duration", 0, "TestCancelStressThroughAgents: bound on its run time (0: 90s scaled by testscale)")
)

// TestCancelStressThroughAgents is issue 9's cancel stress (the body
// test/TestCancelStress runs over TCP and backend/ibverbs in the VM) through
// two real host agents (rdmamgr nodes in agent mode, TCP between them,
// naming different hosts): process A's two queue pairs go through its
// agent, the far TCP route and agent B to a buffer of process B. Victims
// are cancelled before posting, given tiny deadlines, cancelled mid-flight
// and ended at Wait; their memory is reused the moment the outcome is
// reported and watched a round more: through an agent the agent's proxy
// writes into the process's pages, so a byte landing after the process was
// told the operation ended would count as stale. Neighbours all succeed.
// Bounded for CI (4,000 victims, 1,000 under -race); a long run by hand:
//
//	go test -count=1 -timeout 2h -run TestCancelStressThroughAgents -v ./backend/agent -args -cancel.ops=200000 -cancel.duration=1h
func TestCancelStressThroughAgents(t *testing.T) { agentStress(t, false) }

// TestCancelStressThroughAgentsCQ is the same with both queue pairs
// reporting into one completion queue: each victim's outcome is taken from
// the queue's report (StressEnv.CQ).
func TestCancelStressThroughAgentsCQ(t *testing.T) { agentStress(t, true) }

func agentStress(t *testing.T, viaCQ bool) {
	const maxSize = 256 << 10
	ops := *stressOps
	if ops == 0 {
		ops = 4000
		if testscale.Race {
			ops = 1000
		}
		if viaCQ {
			ops /= 5
		}
	}
	bound := *stressDuration
	if bound == 0 {
		bound = testscale.Timeout(90 * time.Second)
	}
	timeout := testscale.Timeout(30 * time.Second)

	ctx := context.Background()
	dir := t.TempDir()
	var sockets [2]string
	for i, host := range []string{"host-a", "host-b"} {
		sockets[i] = filepath.Join(dir, host+".sock")
		n, err := node.Start(ctx, node.Config{HostAgent: node.HostAgent{Socket: sockets[i], HostID: host}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
	}
	a, regA := newProcess(t, backendtest.OwnerA, sockets[0])
	backendtest.CloseAtCleanup(t, timeout, a, regA)
	b, regB := newProcess(t, backendtest.OwnerB, sockets[1])
	backendtest.CloseAtCleanup(t, timeout, b, regB)
	rt := backendtest.MustConnect(t, timeout, a, b, backendtest.OwnerB, backendtest.OwnerA)

	remote, remoteMem := backendtest.Alloc(t, regB, backendtest.StressRemoteSize(maxSize), buffer.AccessReadWrite)
	backendtest.Random(t, remoteMem)
	data := append([]byte(nil), remoteMem...) // the remote content gets are checked against
	local, localMem := backendtest.Alloc(t, regA, backendtest.StressLocalSize(maxSize), buffer.AccessReadWrite)

	var qps []*queuepair.QueuePair
	for id := range uint64(2) {
		qp := wiring.NewQueuePair(id+1, backendtest.OwnerB, rt, regA, qpbind.Options{Timeout: timeout, Kind: backend.KindAgent}).(*queuepair.QueuePair)
		t.Cleanup(qp.Release) // before the route's Close (cleanups run last first)
		qps = append(qps, qp)
	}
	env := backendtest.StressEnv{
		QPs: qps, Remote: remote, RemoteData: data, Local: local, LocalMem: localMem,
		MaxSize: maxSize, Victims: ops, Duration: bound, Timeout: timeout, Seed: rand.Uint64(),
	}
	how := "Wait"
	if viaCQ {
		env.CQ = queuepair.NewCompletionQueue(256)
		for _, qp := range qps {
			qp.SetCompletionQueue(env.CQ)
		}
		how = "a completion queue"
	}
	rep := backendtest.CancelStress(t, env)
	t.Logf("cancel stress through two host agents (TCP far route), seed %#x, reported by %s: %s", env.Seed, how, rep)
	if rep.Ended < ops && !t.Failed() {
		t.Errorf("only %d operations ended early within %v (want %d)", rep.Ended, bound, ops)
	}
	if err := rt.Err(); err != nil {
		t.Fatalf("route failed: %v", err)
	}
	// Victim puts wrote only the last third of the remote buffer: the part
	// gets read is still what it was.
	backendtest.AssertSame(t, "the remote buffer's first two thirds", remoteMem[:2*maxSize], data[:2*maxSize])
	for _, qp := range qps {
		qp.Release()
	}
}
