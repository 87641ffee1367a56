//go:build linux

// TestSoak's scenario: its flags and limits, the test itself and its
// phases (the counts before, the run with workers and killer, the wind-down
// and the counts after). The shared state and the killer are in
// soak_run_test.go, the workers in soak_worker_test.go, the report and its
// checks in soak_report_test.go, the probes in soak_probe_test.go.

package test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/leakcheck"
)

var (
	soakDuration  = flag.Duration("soak.duration", 20*time.Second, "how long TestSoak moves data while it kills and restarts daemons")
	soakDaemons   = flag.Int("soak.daemons", 3, "daemons TestSoak runs")
	soakWorkers   = flag.Int("soak.workers", 6, "TestSoak's concurrent workers")
	soakKillEvery = flag.Duration("soak.kill-every", 3*time.Second, "TestSoak SIGKILLs a random daemon this often and restarts it at the same address (0: never)")
)

const (
	soakRemoteSize = 4 << 20 // each worker's buffer at each daemon
	soakLocalSize  = 4 << 20 // each worker's local source, and destination
	soakMaxOp      = 2 << 20 // largest single transfer
	soakMaxBatch   = 4       // transfers in flight in one Submit
	// soakRestartDelay: a killed daemon stays down this long.
	soakRestartDelay = 500 * time.Millisecond
	// soakGrace: errors of a daemon's routes and requests still belong to
	// its kill window this long after it was restarted. Covers
	// protoactor's endpoint writer, which sleeps 2 s between connection
	// attempts and holds the messages sent meanwhile.
	soakGrace = 10 * time.Second
	// soakQPTimeout bounds one RequestQueuePair.
	soakQPTimeout = 8 * time.Second
	// soakReachedLife: an incarnation of a daemon that lived at least this
	// long must have served some worker.
	soakReachedLife = 10 * time.Second
	// Goroutines and file descriptors the process may hold after the run
	// beyond what it held before. Both counts are taken in the same
	// state: each daemon reached once through a queue pair, then every
	// queue pair, buffer and route released. protoactor keeps one
	// endpoint (an endpoint writer with its gRPC client connection, one
	// socket) to each daemon it talked to, and each daemon keeps one to
	// us (a server stream, one socket): those exist before and after, to
	// the current incarnations. The slack absorbs their transient parts
	// (gRPC transport goroutines starting or ending, a late future's
	// timer goroutine); a leak per kill, per route or per operation is
	// far beyond it.
	soakSlackGoroutines = 5
	soakSlackFDs        = 5
	// soakWorkerFDs: each worker's two local buffers, held until the
	// test's cleanup, are memfd-backed: one descriptor each.
	soakWorkerFDs = 2
	// soakSettle bounds waiting for the counts to come back down.
	soakSettle = 30 * time.Second
)

// TestSoak runs daemons that a killer SIGKILLs at random and restarts at
// the same address, while workers move random slices (1 B .. 2 MiB, random
// offsets; sometimes several in flight through Submit) to buffers at the
// daemons and back, comparing every byte. The test's own manager is never
// restarted: after each restart it must set up a new route to the daemon
// at the same PID by itself. Every error must be one a kill explains
// (rdmamgr.ErrPeerGone, ErrDeadline, ErrClosed, rdmamgr.ErrUnknownPeer,
// ErrTimeout, rdmamgr.ErrReleased), on a daemon that was killed since the
// worker's queue pair was made or within soakGrace of its restart; any
// other outcome is a wrong completion, and a success with wrong bytes is
// corruption: both must be 0. Goroutines and file descriptors must not
// grow, and every daemon must be reached again after its last restart.
//
// CI runs it for -soak.duration (40 s); longer runs take the flag. With
// -short (and neither flag given) it runs 8 s with a kill every 2 s: four
// kills and restarts, every check the same.
func TestSoak(t *testing.T) {
	if testing.Short() {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["soak.duration"] {
			*soakDuration = 8 * time.Second
		}
		if !set["soak.kill-every"] {
			*soakKillEvery = 2 * time.Second
		}
	}
	if *soakDaemons < 1 || *soakWorkers < 1 || *soakDuration <= 0 {
		t.Fatalf("-soak.daemons %d, -soak.workers %d, -soak.duration %v: need at least 1 daemon, 1 worker and a duration",
			*soakDaemons, *soakWorkers, *soakDuration)
	}
	checkLocalClean(t)
	r := newRand(t)
	slots := startFixedDaemons(t, *soakDaemons)
	s := &soakRun{slots: slots, errs: make(map[string]map[string]int)}

	before := soakBefore(t, r, slots)

	workers := make([]*soakWorker, *soakWorkers)
	for i := range workers {
		workers[i] = newSoakWorker(t, i, rand.New(rand.NewPCG(r.Uint64(), r.Uint64())), len(slots))
	}
	elapsed := s.run(t, r, workers)
	after := soakAfter(t, r, slots, workers, before)

	rep := s.report(workers, elapsed)
	// The workers' local buffers are still held (a memfd each) and count
	// as part of before.
	rep.gBefore, rep.gAfter, rep.fdBefore, rep.fdAfter = before.g, after.g, before.fd+soakWorkerFDs*len(workers), after.fd
	text := rep.String()
	t.Log(text)
	if !testing.Verbose() {
		fmt.Print(text)
	}

	rep.check(t, before)
	if t.Failed() {
		for _, sl := range slots {
			sl.logStderr(t)
		}
	}
}

// soakCounts are the process's goroutines and file descriptors, taken
// with every daemon reached once through a queue pair and everything
// released again.
type soakCounts struct {
	g, fd int
	// groups and fds say what the goroutines and descriptors were (only
	// before the run: they explain a growth).
	groups *leakcheck.Snapshot
	fds    string
}

// soakBefore reaches every daemon once, then lets everything go, so the
// counts it returns are taken with protoactor's endpoints to every daemon
// up.
func soakBefore(t *testing.T, r *rand.Rand, slots []*fixedDaemon) soakCounts {
	t.Helper()
	for _, sl := range slots {
		if err := reachDaemon(r, sl, 1<<20); err != nil {
			t.Fatalf("%s before the run: %v", sl.name, err)
		}
	}
	if err := waitNoRoutes(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // closed routes' goroutines end
	// A bound on growth, not goleak's "nothing new": see internal/leakcheck.
	var c soakCounts
	c.g, c.fd = runtime.NumGoroutine(), countFDs(t)
	c.groups, c.fds = leakcheck.Take(), fdSummary()
	return c
}

// run starts the workers, the killer and the progress log, and returns
// after -soak.duration, once every worker stopped and every daemon is up
// again, with how long that took.
func (s *soakRun) run(t *testing.T, r *rand.Rand, workers []*soakWorker) time.Duration {
	t.Logf("soak: %v, %d daemons, %d workers, a kill every %v", *soakDuration, len(s.slots), len(workers), *soakKillEvery)
	ctx, cancel := context.WithTimeout(context.Background(), *soakDuration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx, s) }()
	}
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		if *soakKillEvery > 0 {
			s.killer(ctx, t, rand.New(rand.NewPCG(r.Uint64(), r.Uint64())))
		}
	}()
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		s.progress(ctx, t, start)
	}()
	<-killerDone // every daemon is up again when the killer returns
	wg.Wait()
	<-progressDone
	return time.Since(start)
}

// soakAfter releases what the workers hold, reaches every daemon again and
// returns the counts once they are back within the slack of before's, or
// soakSettle passed.
func soakAfter(t *testing.T, r *rand.Rand, slots []*fixedDaemon, workers []*soakWorker, before soakCounts) soakCounts {
	t.Helper()
	// Give back the queue pairs (their routes close with the last one)
	// and the daemons' buffers (those of killed incarnations are gone:
	// their new manager answers ErrReleased). The workers' local buffers
	// (a memfd each: soakWorkerFDs) go in the test's cleanup.
	for _, w := range workers {
		if err := w.close(slots); err != nil {
			t.Error(err)
		}
	}

	// Every daemon, restarted or not, serves a new queue pair from the
	// same manager that talked to its earlier incarnations.
	for _, sl := range slots {
		if err := reachDaemon(r, sl, 1<<20); err != nil {
			t.Errorf("%s after the run (incarnation %d): %v", sl.name, sl.gen(), err)
		}
	}
	if err := waitNoRoutes(30 * time.Second); err != nil {
		t.Error(err)
	}
	var c soakCounts
	c.g, c.fd = runtime.NumGoroutine(), countFDs(t)
	settle := time.Now().Add(soakSettle)
	for (c.g > before.g+soakSlackGoroutines || c.fd > before.fd+soakSlackFDs+soakWorkerFDs*len(workers)) && time.Now().Before(settle) {
		time.Sleep(100 * time.Millisecond)
		c.g, c.fd = runtime.NumGoroutine(), countFDs(t)
	}
	return c
}
