//go:build linux

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/leakcheck"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

var (
	soakDuration  = flag.Duration("soak.duration", 40*time.Second, "how long TestSoak moves data while it kills and restarts daemons")
	soakDaemons   = flag.Int("soak.daemons", 3, "daemons TestSoak runs")
	soakWorkers   = flag.Int("soak.workers", 6, "TestSoak's concurrent workers")
	soakKillEvery = flag.Duration("soak.kill-every", 4*time.Second, "TestSoak SIGKILLs a random daemon this often and restarts it at the same address (0: never)")
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
	// soakSettle bounds waiting for the counts to come back down.
	soakSettle = 30 * time.Second
)

// TestSoak runs daemons that a killer SIGKILLs at random and restarts at
// the same address, while workers move random slices (1 B .. 2 MiB, random
// offsets; sometimes several in flight through Submit) to buffers at the
// daemons and back, comparing every byte. The test's own manager is never
// restarted: after each restart it must set up a new route to the daemon
// at the same PID by itself. Every error must be one a kill explains
// (backend.ErrPeerGone, ErrDeadline, ErrClosed, actor.ErrUnknownPeer,
// ErrTimeout, buffer.ErrReleased), on a daemon that was killed since the
// worker's queue pair was made or within soakGrace of its restart; any
// other outcome is a wrong completion, and a success with wrong bytes is
// corruption: both must be 0. Goroutines and file descriptors must not
// grow, and every daemon must be reached again after its last restart.
//
// CI runs it for -soak.duration (40 s); longer runs take the flag.
func TestSoak(t *testing.T) {
	if *soakDaemons < 1 || *soakWorkers < 1 || *soakDuration <= 0 {
		t.Fatalf("-soak.daemons %d, -soak.workers %d, -soak.duration %v: need at least 1 daemon, 1 worker and a duration",
			*soakDaemons, *soakWorkers, *soakDuration)
	}
	checkLocalClean(t)
	r := newRand(t)
	slots := startFixedDaemons(t, *soakDaemons)
	s := &soakRun{slots: slots, errs: make(map[string]map[string]int)}

	// Reach every daemon once, then let everything go, so the counts
	// below are taken with protoactor's endpoints to every daemon up.
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
	gBefore, fdBefore := runtime.NumGoroutine(), countFDs(t)
	groupsBefore, fdsBefore := leakcheck.Take(), fdSummary()

	workers := make([]*soakWorker, *soakWorkers)
	for i := range workers {
		workers[i] = newSoakWorker(t, i, rand.New(rand.NewPCG(r.Uint64(), r.Uint64())), len(slots))
	}

	t.Logf("soak: %v, %d daemons, %d workers, a kill every %v", *soakDuration, len(slots), len(workers), *soakKillEvery)
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
	elapsed := time.Since(start)

	// Give back the queue pairs (their routes close with the last one)
	// and the daemons' buffers (those of killed incarnations are gone:
	// their new manager answers ErrReleased). The workers' local buffers
	// (memory, no descriptor) go in the test's cleanup.
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
	gAfter, fdAfter := runtime.NumGoroutine(), countFDs(t)
	settle := time.Now().Add(soakSettle)
	for (gAfter > gBefore+soakSlackGoroutines || fdAfter > fdBefore+soakSlackFDs) && time.Now().Before(settle) {
		time.Sleep(100 * time.Millisecond)
		gAfter, fdAfter = runtime.NumGoroutine(), countFDs(t)
	}

	rep := s.report(workers, elapsed)
	rep.gBefore, rep.gAfter, rep.fdBefore, rep.fdAfter = gBefore, gAfter, fdBefore, fdAfter
	text := rep.String()
	t.Log(text)
	if !testing.Verbose() {
		fmt.Print(text)
	}

	if rep.ops == 0 {
		t.Errorf("no operation succeeded")
	}
	if rep.corrupted != 0 {
		t.Errorf("%d corrupted bytes in %d operations that succeeded", rep.corrupted, rep.corruptOps)
	}
	if rep.wrong != 0 {
		t.Errorf("%d wrong completions; the first ones:\n  %s", rep.wrong, strings.Join(rep.wrongSamples, "\n  "))
	}
	for _, m := range rep.unreached {
		t.Errorf("restarted daemon not reached again: %s", m)
	}
	if rep.restarts > 0 && rep.reachedAfterRestart == 0 {
		t.Errorf("%d restarts, and no operation succeeded on a restarted daemon", rep.restarts)
	}
	if gAfter > gBefore+soakSlackGoroutines {
		t.Errorf("goroutines grew from %d to %d (slack %d); the groups that grew:\n%s", gBefore, gAfter, soakSlackGoroutines, leakcheck.Take().Growth(groupsBefore))
	}
	if fdAfter > fdBefore+soakSlackFDs {
		t.Errorf("file descriptors grew from %d to %d (slack %d): before\n%s\nafter\n%s", fdBefore, fdAfter, soakSlackFDs, fdsBefore, fdSummary())
	}
	if t.Failed() {
		for _, sl := range slots {
			sl.logStderr(t)
		}
	}
}

// soakRun is the state the workers and the killer share.
type soakRun struct {
	slots []*fixedDaemon

	ops, bytes    atomic.Uint64
	puts, gets    atomic.Uint64
	putB, getB    atomic.Uint64
	batches       atomic.Uint64
	corrupted     atomic.Uint64
	corruptOps    atomic.Uint64
	kills         atomic.Uint64
	restarts      atomic.Uint64
	nerrs, nwrong atomic.Uint64

	mu       sync.Mutex
	errs     map[string]map[string]int // kind -> stage -> count
	wrong    []string                  // the first wrong completions
	corrupts []string                  // the first corruptions
	// ctlFailed: how long each failed request_queue_pair or
	// request_buffer took.
	ctlFailed []time.Duration
}

// soakAllowed are the errors a killed daemon explains, in the order they
// are named (a CLOSED reply wraps actor.ErrClosed and backend.ErrClosed).
var soakAllowed = []struct {
	name string
	err  error
}{
	{"backend.ErrPeerGone", backend.ErrPeerGone},
	{"backend.ErrDeadline", backend.ErrDeadline},
	{"backend.ErrClosed", backend.ErrClosed},
	{"actor.ErrUnknownPeer", actor.ErrUnknownPeer},
	{"actor.ErrTimeout", actor.ErrTimeout},
	{"buffer.ErrReleased", buffer.ErrReleased},
}

// soakKind names err's sentinel and reports whether a kill explains it.
func soakKind(err error) (string, bool) {
	if errors.Is(err, errHung) {
		return "hung", false
	}
	for _, a := range soakAllowed {
		if errors.Is(err, a.err) {
			return a.name, true
		}
	}
	return "unexpected", false
}

// fail records a failed request or operation of stage on sl, whose
// incarnation was gen when the worker started depending on it.
func (s *soakRun) fail(sl *fixedDaemon, gen int, stage string, err error) {
	kind, allowed := soakKind(err)
	inWindow := sl.inKillWindow(gen)
	s.mu.Lock()
	defer s.mu.Unlock()
	if allowed && inWindow {
		s.nerrs.Add(1)
		m := s.errs[kind]
		if m == nil {
			m = make(map[string]int)
			s.errs[kind] = m
		}
		m[stage]++
		return
	}
	s.nwrong.Add(1)
	if len(s.wrong) < 10 {
		why := kind
		if allowed {
			why += ", outside a kill window"
		}
		s.wrong = append(s.wrong, fmt.Sprintf("%s %s (incarnation %d, now %d) at %s: %v [%s]",
			sl.name, stage, gen, sl.gen(), time.Now().Format("15:04:05.000"), err, why))
	}
}

// slowControl records how long a failed control request took.
func (s *soakRun) slowControl(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctlFailed = append(s.ctlFailed, d)
}

// corrupt records a successful get that brought wrong bytes.
func (s *soakRun) corrupt(sl *fixedDaemon, what string, got, want []byte) {
	n := 0
	for i := range got {
		if got[i] != want[i] {
			n++
		}
	}
	s.corrupted.Add(uint64(n))
	s.corruptOps.Add(1)
	s.mu.Lock()
	if len(s.corrupts) < 10 {
		s.corrupts = append(s.corrupts, fmt.Sprintf("%s %s: %d of %d bytes wrong, %s", sl.name, what, n, len(got), firstDiff(got, want)))
	}
	s.mu.Unlock()
}

// killer SIGKILLs a random daemon every -soak.kill-every and restarts it at
// the same address after soakRestartDelay, until ctx ends. It returns with
// every daemon up.
func (s *soakRun) killer(ctx context.Context, t *testing.T, r *rand.Rand) {
	tick := time.NewTicker(*soakKillEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sl := s.slots[r.IntN(len(s.slots))]
		if err := sl.kill(); err != nil {
			t.Errorf("killer: %v", err)
			return
		}
		s.kills.Add(1)
		time.Sleep(soakRestartDelay)
		if err := sl.restart(); err != nil {
			t.Errorf("killer: %v", err)
			return
		}
		s.restarts.Add(1)
	}
}

// progress logs the figures every minute of a long run.
func (s *soakRun) progress(ctx context.Context, t *testing.T, start time.Time) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t.Logf("soak %v: %d ops, %.2f GiB, %d errors, %d wrong, %d corrupted bytes, %d kills, %d goroutines",
			time.Since(start).Round(time.Second), s.ops.Load(), gib(s.bytes.Load()), s.nerrs.Load(), s.nwrong.Load(),
			s.corrupted.Load(), s.kills.Load(), runtime.NumGoroutine())
	}
}

// soakWorker moves data to every daemon through its own queue pairs and
// buffers; nothing of it is shared with other workers.
type soakWorker struct {
	id             int
	r              *rand.Rand
	src, dst       buffer.Buffer
	srcMem, dstMem []byte
	conns          []soakConn // by daemon
	putWR, getWR   queuepair.WorkRequest
	// peers: manager ids of the daemons' incarnations this worker moved
	// data with.
	peers map[uint64]*peerSeen
	// routes: the routes its queue pairs used, by daemon.
	routes map[queuepair.Route]int
}

// soakConn is a worker's queue pair and buffer at one daemon.
type soakConn struct {
	qp     *queuepair.QueuePair
	qpGen  int // the daemon's incarnation when the queue pair was asked for
	remote buffer.Buffer
}

// peerSeen: successful operations with one incarnation of a daemon.
type peerSeen struct {
	slot      int
	firstPost time.Time // when the first of them was posted
	ops       int
}

func newSoakWorker(t *testing.T, id int, r *rand.Rand, daemons int) *soakWorker {
	t.Helper()
	w := &soakWorker{id: id, r: r, conns: make([]soakConn, daemons),
		peers: make(map[uint64]*peerSeen), routes: make(map[queuepair.Route]int)}
	w.src, w.srcMem = localBuffer(t, soakLocalSize)
	w.dst, w.dstMem = localBuffer(t, soakLocalSize)
	return w
}

// size returns a transfer size in 1..max, spread evenly over the powers of
// two so that small and unaligned sizes are as common as large ones.
func (w *soakWorker) size(max int) int {
	e := w.r.IntN(22) // 1 B .. 2 MiB
	lo := 1 << e
	n := lo + w.r.IntN(lo)
	return min(n, max)
}

func (w *soakWorker) run(ctx context.Context, s *soakRun) {
	for ctx.Err() == nil {
		si := w.r.IntN(len(s.slots))
		sl := s.slots[si]
		c := &w.conns[si]
		if c.qp == nil {
			gen := sl.gen()
			asked := time.Now()
			qctx, cancel := context.WithTimeout(context.Background(), soakQPTimeout)
			qp, err := local.mgr.Client().RequestQueuePair(qctx, sl.pid)
			cancel()
			if err != nil {
				s.slowControl(time.Since(asked))
				s.fail(sl, gen, "request_queue_pair", err)
				sleepCtx(ctx, 50*time.Millisecond)
				continue
			}
			c.qp, c.qpGen = qp, gen
			w.routes[qp.Route()] = si
		}
		if c.remote.OwnerID != c.qp.PeerID() {
			// No buffer yet, or one of an incarnation that was killed.
			gen := sl.gen()
			asked := time.Now()
			b, err := local.client(sl.pid).RequestBuffer(context.Background(), soakRemoteSize, buffer.AccessReadWrite)
			if err != nil {
				s.slowControl(time.Since(asked))
				s.fail(sl, gen, "request_buffer", err)
				sleepCtx(ctx, 50*time.Millisecond)
				continue
			}
			c.remote = b
			if b.OwnerID != c.qp.PeerID() {
				// The daemon was restarted between the queue pair and
				// the buffer: the queue pair leads to a dead manager.
				c.qp.Release()
				c.qp = nil
				continue
			}
		}
		var ok bool
		if w.r.IntN(3) == 0 {
			ok = w.batch(s, si, c)
			s.batches.Add(1)
		} else {
			ok = w.single(s, si, c)
		}
		if !ok {
			return // an operation hung: its work request cannot be reused
		}
	}
}

// single puts fresh random bytes to a random slice of the daemon's buffer
// and gets them back into a poisoned slice. It returns false when an
// operation hung.
func (w *soakWorker) single(s *soakRun, si int, c *soakConn) bool {
	sl := s.slots[si]
	n := w.size(soakMaxOp)
	ro := w.r.IntN(soakRemoteSize - n + 1)
	so := w.r.IntN(soakLocalSize - n + 1)
	do := w.r.IntN(soakLocalSize - n + 1)
	src, dst := w.srcMem[so:so+n], w.dstMem[do:do+n]
	rb := slice(c.remote, uint64(ro), uint64(n))
	fill(w.r, src) // fresh bytes: a lost put cannot pass
	soakPoison(dst, src)
	posted := time.Now()

	// Half the time through the caller-owned, reused work requests.
	reuse := w.r.IntN(2) == 0
	var put *queuepair.WorkRequest
	if reuse {
		c.qp.PostPut(&w.putWR, slice(w.src, uint64(so), uint64(n)), rb)
		put = &w.putWR
	} else {
		put = c.qp.Put(slice(w.src, uint64(so), uint64(n)), rb)
	}
	if err := wait(put); err != nil {
		return w.opFailed(s, si, c, "put", err)
	}
	s.done(true, n)
	var get *queuepair.WorkRequest
	if reuse {
		c.qp.PostGet(&w.getWR, slice(w.dst, uint64(do), uint64(n)), rb)
		get = &w.getWR
	} else {
		get = c.qp.Get(slice(w.dst, uint64(do), uint64(n)), rb)
	}
	if err := wait(get); err != nil {
		return w.opFailed(s, si, c, "get", err)
	}
	s.done(false, n)
	if !bytes.Equal(dst, src) {
		s.corrupt(sl, fmt.Sprintf("%d bytes remote@%d -> local@%d (put from local@%d)", n, ro, do, so), dst, src)
	}
	w.seen(si, c.qp.PeerID(), posted, 2)
	return true
}

// batch puts k slices in one Submit, then gets them back in another: k
// transfers in flight at once, each at its own stripe of the buffers.
func (w *soakWorker) batch(s *soakRun, si int, c *soakConn) bool {
	sl := s.slots[si]
	k := 2 + w.r.IntN(soakMaxBatch-1)
	rseg, lseg := soakRemoteSize/k, soakLocalSize/k
	type piece struct{ n, ro, so, do int }
	ps := make([]piece, k)
	puts := make([]queuepair.Op, k)
	gets := make([]queuepair.Op, k)
	for i := range ps {
		n := w.size(min(rseg, lseg, soakMaxOp))
		p := piece{n: n, ro: i*rseg + w.r.IntN(rseg-n+1), so: i*lseg + w.r.IntN(lseg-n+1), do: i*lseg + w.r.IntN(lseg-n+1)}
		ps[i] = p
		fill(w.r, w.srcMem[p.so:p.so+n])
		soakPoison(w.dstMem[p.do:p.do+n], w.srcMem[p.so:p.so+n])
		rb := slice(c.remote, uint64(p.ro), uint64(n))
		puts[i] = queuepair.PutOp(slice(w.src, uint64(p.so), uint64(n)), rb)
		gets[i] = queuepair.GetOp(slice(w.dst, uint64(p.do), uint64(n)), rb)
	}
	posted := time.Now()
	for phase, ops := range [][]queuepair.Op{puts, gets} {
		stage := []string{"batch put", "batch get"}[phase]
		var failed error
		for i, wr := range c.qp.Submit(context.Background(), ops...).Requests() {
			err := wait(wr)
			if errors.Is(err, errHung) {
				s.fail(sl, c.qpGen, stage, err)
				return false
			}
			if err != nil {
				s.fail(sl, c.qpGen, stage, err)
				failed = err
				continue
			}
			s.done(phase == 0, ps[i].n)
		}
		if failed != nil {
			w.dropQP(c, failed)
			return true
		}
	}
	for _, p := range ps {
		got, want := w.dstMem[p.do:p.do+p.n], w.srcMem[p.so:p.so+p.n]
		if !bytes.Equal(got, want) {
			s.corrupt(sl, fmt.Sprintf("batched %d bytes remote@%d -> local@%d (put from local@%d)", p.n, p.ro, p.do, p.so), got, want)
		}
	}
	w.seen(si, c.qp.PeerID(), posted, 2*k)
	return true
}

func (s *soakRun) done(put bool, n int) {
	s.ops.Add(1)
	s.bytes.Add(uint64(n))
	if put {
		s.puts.Add(1)
		s.putB.Add(uint64(n))
	} else {
		s.gets.Add(1)
		s.getB.Add(uint64(n))
	}
}

// opFailed records a failed operation and gives up the queue pair; it
// returns false when the operation hung.
func (w *soakWorker) opFailed(s *soakRun, si int, c *soakConn, stage string, err error) bool {
	s.fail(s.slots[si], c.qpGen, stage, err)
	if errors.Is(err, errHung) {
		return false
	}
	w.dropQP(c, err)
	return true
}

// dropQP releases a queue pair that failed; the next operation asks for a
// new one (a new route, if the daemon was restarted).
func (w *soakWorker) dropQP(c *soakConn, err error) {
	c.qp.Release()
	c.qp = nil
	if errors.Is(err, buffer.ErrReleased) {
		c.remote = buffer.Buffer{}
	}
}

func (w *soakWorker) seen(si int, peer uint64, posted time.Time, ops int) {
	p := w.peers[peer]
	if p == nil {
		p = &peerSeen{slot: si, firstPost: posted}
		w.peers[peer] = p
	}
	p.ops += ops
}

// close releases the worker's queue pairs and buffers.
func (w *soakWorker) close(slots []*fixedDaemon) error {
	var errs []error
	for i := range w.conns {
		c := &w.conns[i]
		if c.qp != nil {
			c.qp.Release()
			c.qp = nil
		}
		if c.remote.OwnerID != 0 {
			// A buffer of a killed incarnation is unknown to the daemon's
			// new manager: ErrReleased.
			err := local.client(slots[i].pid).ReleaseBuffer(context.Background(), c.remote)
			if err != nil && !errors.Is(err, buffer.ErrReleased) {
				errs = append(errs, fmt.Errorf("worker %d: release buffer at %s: %w", w.id, slots[i].name, err))
			}
			c.remote = buffer.Buffer{}
		}
	}
	return errors.Join(errs...)
}

// soakReport holds the figures of a run.
type soakReport struct {
	elapsed                  time.Duration
	ops, puts, gets, batches uint64
	bytes, putB, getB        uint64
	errs                     map[string]map[string]int
	nerrs                    uint64
	corrupted, corruptOps    uint64
	corruptSamples           []string
	wrong                    uint64
	wrongSamples             []string
	kills, restarts          uint64
	incarnations, reached    int
	reachedAfterRestart      int
	unreached                []string
	routes, reestablished    int
	routesBy                 []string
	gBefore, gAfter          int
	fdBefore, fdAfter        int
	restartRetries           int
	// reconnect: for each restarted incarnation that served the workers,
	// from its ready line to the first operation that succeeded on it.
	reconnect []time.Duration
	ctlFailed []time.Duration
}

func (s *soakRun) report(workers []*soakWorker, elapsed time.Duration) *soakReport {
	rep := &soakReport{
		elapsed: elapsed,
		ops:     s.ops.Load(), puts: s.puts.Load(), gets: s.gets.Load(), batches: s.batches.Load(),
		bytes: s.bytes.Load(), putB: s.putB.Load(), getB: s.getB.Load(),
		nerrs: s.nerrs.Load(), corrupted: s.corrupted.Load(), corruptOps: s.corruptOps.Load(),
		wrong: s.nwrong.Load(), kills: s.kills.Load(), restarts: s.restarts.Load(),
	}
	s.mu.Lock()
	rep.errs = s.errs
	rep.wrongSamples = slices.Clone(s.wrong)
	rep.corruptSamples = slices.Clone(s.corrupts)
	rep.ctlFailed = slices.Clone(s.ctlFailed)
	s.mu.Unlock()

	// Merge what the workers saw, by manager id (one per incarnation).
	peers := make(map[uint64]*peerSeen)
	routes := make([]map[queuepair.Route]bool, len(s.slots))
	for i := range routes {
		routes[i] = make(map[queuepair.Route]bool)
	}
	for _, w := range workers {
		for id, p := range w.peers {
			q := peers[id]
			if q == nil {
				q = &peerSeen{slot: p.slot, firstPost: p.firstPost}
				peers[id] = q
			}
			if p.firstPost.Before(q.firstPost) {
				q.firstPost = p.firstPost
			}
			q.ops += p.ops
		}
		for r, si := range w.routes {
			routes[si][r] = true
		}
	}
	for si, sl := range s.slots {
		rep.routes += len(routes[si])
		rep.reestablished += max(len(routes[si])-1, 0)
		incs := sl.incarnations()
		rep.incarnations += len(incs)
		rep.restartRetries += sl.portRetries()
		ops := make([]int, len(incs))
		first := make([]time.Time, len(incs))
		for _, p := range peers {
			if p.slot != si {
				continue
			}
			// An operation that succeeded was posted while its
			// incarnation lived: that is the one it served.
			for k, inc := range incs {
				if !p.firstPost.Before(inc.spawned) && (inc.killed.IsZero() || p.firstPost.Before(inc.killed)) {
					ops[k] += p.ops
					if first[k].IsZero() || p.firstPost.Before(first[k]) {
						first[k] = p.firstPost
					}
					break
				}
			}
		}
		var parts []string
		for k, inc := range incs {
			if ops[k] > 0 {
				rep.reached++
				if k > 0 {
					rep.reachedAfterRestart++
					rep.reconnect = append(rep.reconnect, max(first[k].Sub(inc.ready), 0))
				}
			}
			end := inc.killed
			if end.IsZero() {
				end = time.Now()
			}
			life := end.Sub(inc.ready)
			if k > 0 && ops[k] == 0 && life >= soakReachedLife && !inc.killed.IsZero() {
				rep.unreached = append(rep.unreached, fmt.Sprintf("%s incarnation %d lived %v after its restart and served no operation",
					sl.name, k+1, life.Round(time.Millisecond)))
			}
			parts = append(parts, fmt.Sprintf("%d", ops[k]))
		}
		rep.routesBy = append(rep.routesBy, fmt.Sprintf("%s: %d routes, ops per incarnation [%s]", sl.name, len(routes[si]), strings.Join(parts, " ")))
	}
	return rep
}

func (r *soakReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak report after %v\n", r.elapsed.Round(time.Millisecond))
	fmt.Fprintf(&b, "  operations:        %d (%d puts, %d gets, each get's bytes compared; %d batches of 2..%d in flight)\n",
		r.ops, r.puts, r.gets, r.batches, soakMaxBatch)
	fmt.Fprintf(&b, "  bytes moved:       %.3f GiB (put %.3f GiB, got %.3f GiB), %.1f MiB/s\n",
		gib(r.bytes), gib(r.putB), gib(r.getB), float64(r.bytes)/(1<<20)/r.elapsed.Seconds())
	fmt.Fprintf(&b, "  errors (allowed):  %d\n", r.nerrs)
	kinds := make([]string, 0, len(r.errs))
	for k := range r.errs {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		stages := make([]string, 0, len(r.errs[k]))
		total := 0
		for st, n := range r.errs[k] {
			stages = append(stages, fmt.Sprintf("%s %d", st, n))
			total += n
		}
		sort.Strings(stages)
		fmt.Fprintf(&b, "    %-22s %d (%s)\n", k, total, strings.Join(stages, ", "))
	}
	if n := len(r.ctlFailed); n > 0 {
		slices.Sort(r.ctlFailed)
		fmt.Fprintf(&b, "    failed control requests took: min %v, median %v, max %v\n",
			r.ctlFailed[0].Round(time.Millisecond), r.ctlFailed[n/2].Round(time.Millisecond), r.ctlFailed[n-1].Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "  corrupted bytes:   %d (in %d operations)\n", r.corrupted, r.corruptOps)
	for _, c := range r.corruptSamples {
		fmt.Fprintf(&b, "    %s\n", c)
	}
	fmt.Fprintf(&b, "  wrong completions: %d\n", r.wrong)
	for _, w := range r.wrongSamples {
		fmt.Fprintf(&b, "    %s\n", w)
	}
	fmt.Fprintf(&b, "  kills: %d, restarts: %d (port busy, retried: %d)\n", r.kills, r.restarts, r.restartRetries)
	fmt.Fprintf(&b, "  incarnations reached by the workers: %d of %d (%d of them restarted ones)\n", r.reached, r.incarnations, r.reachedAfterRestart)
	if n := len(r.reconnect); n > 0 {
		slices.Sort(r.reconnect)
		fmt.Fprintf(&b, "  restart to first successful operation: min %v, median %v, max %v\n",
			r.reconnect[0].Round(time.Millisecond), r.reconnect[n/2].Round(time.Millisecond), r.reconnect[n-1].Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "  routes set up by the workers' queue pairs: %d (%d re-established to a daemon at the same address)\n", r.routes, r.reestablished)
	for _, s := range r.routesBy {
		fmt.Fprintf(&b, "    %s\n", s)
	}
	fmt.Fprintf(&b, "  goroutines: %d before, %d after; file descriptors: %d before, %d after\n", r.gBefore, r.gAfter, r.fdBefore, r.fdAfter)
	return b.String()
}

func gib(n uint64) float64 { return float64(n) / (1 << 30) }

// soakPoison sets dst to the complement of want: every byte a get fails to
// write is wrong.
func soakPoison(dst, want []byte) {
	for len(dst) >= 8 {
		binary.LittleEndian.PutUint64(dst, ^binary.LittleEndian.Uint64(want))
		dst, want = dst[8:], want[8:]
	}
	for i := range dst {
		dst[i] = ^want[i]
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// reachDaemon checks that the daemon in sl serves a new queue pair: a
// queue pair and a buffer, random bytes put there and got back, then all
// of it released.
func reachDaemon(r *rand.Rand, sl *fixedDaemon, size uint64) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := local.mgr.Client()
	qp, err := c.RequestQueuePair(ctx, sl.pid)
	if err != nil {
		return fmt.Errorf("queue pair: %w", err)
	}
	defer qp.Release()
	remote, err := local.client(sl.pid).RequestBuffer(ctx, size, buffer.AccessReadWrite)
	if err != nil {
		return fmt.Errorf("buffer: %w", err)
	}
	defer func() {
		if rerr := local.client(sl.pid).ReleaseBuffer(ctx, remote); rerr != nil && err == nil {
			err = fmt.Errorf("release buffer: %w", rerr)
		}
	}()
	var bufs [2]buffer.Buffer
	var mems [2][]byte
	for i := range bufs {
		if bufs[i], err = c.RequestBuffer(ctx, size, buffer.AccessReadWrite); err != nil {
			return fmt.Errorf("local buffer: %w", err)
		}
		defer func() {
			if rerr := local.mgr.Release(ctx, bufs[i]); rerr != nil && err == nil {
				err = fmt.Errorf("release local buffer: %w", rerr)
			}
		}()
		if mems[i], err = local.mgr.Bytes(bufs[i]); err != nil {
			return err
		}
	}
	fill(r, mems[0])
	soakPoison(mems[1], mems[0])
	if err := wait(qp.Put(bufs[0], remote)); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	if err := wait(qp.Get(bufs[1], remote)); err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if !bytes.Equal(mems[1], mems[0]) {
		return fmt.Errorf("round trip: %s", firstDiff(mems[1], mems[0]))
	}
	return nil
}

// waitNoRoutes waits until the test's manager holds no route.
func waitNoRoutes(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := local.mgr.Client().Status(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("status of the test's manager: %w", err)
		}
		if len(st.Routes) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the test's manager still holds %d routes: %v", len(st.Routes), st.Routes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countFDs counts the process's open file descriptors.
func countFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("list file descriptors: %v", err)
	}
	return len(es) - 1 // without ReadDir's own
}

// fdSummary lists what the process's file descriptors point to.
func fdSummary() string {
	es, _ := os.ReadDir("/proc/self/fd")
	counts := make(map[string]int)
	for _, e := range es {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		if i := strings.Index(l, ":["); i > 0 {
			l = l[:i] // socket:[123] -> socket
		}
		counts[l]++
	}
	var lines []string
	for l, n := range counts {
		lines = append(lines, fmt.Sprintf("  %4d %s", n, l))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
