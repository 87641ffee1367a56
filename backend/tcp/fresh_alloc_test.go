package tcp

import (
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestSteadyStateAllocsFreshRequests (run without -race by .ci/run with
// TestSteadyStateAllocs): a poster that does not reuse its
// backend.WorkRequest (the host agent's op, QueuePair.Put/Get and the
// other one-shot verbs) takes its route op from opPool, and a request's
// first op goes back there when it completes; only a request posted again
// keeps one (Scratch). Without that, every such post allocates an op
// (found in review). The requests are made before the measurement: only
// the route's own allocations are counted.
func TestSteadyStateAllocsFreshRequests(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation count")
	}
	p := newPair(t, Config{}, Config{})
	_, local := backendtest.Alloc(t, p.regA, 64, buffer.AccessReadWrite)
	remote, _ := backendtest.Alloc(t, p.regB, 64, buffer.AccessReadWrite)
	sig := &signalDone{ch: make(chan struct{}, 1)}
	const runs = 500
	wrs := make([]backend.WorkRequest, 2*runs+300)
	next := 0
	run := func() {
		wr := &wrs[next]
		next++
		wr.Op, wr.Local, wr.Remote = backend.OpWrite, local, remote
		wr.Deadline, wr.Done = time.Now().Add(waitTimeout), sig
		if err := p.route.Post(wr); err != nil {
			t.Fatal(err)
		}
		<-sig.ch
		if sig.err != nil {
			t.Fatal(sig.err)
		}
	}
	for range 200 {
		run() // warm pools and maps
	}
	if a := testing.AllocsPerRun(runs, run); a > 0.05 {
		t.Errorf("put 64 with a fresh work request each: %.2f allocations per operation, want 0 (a completed op must go back to opPool)", a)
	} else {
		t.Logf("%.3f allocations per operation", a)
	}
}
