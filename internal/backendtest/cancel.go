package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// errTestCancel is the cause the suite cancels with.
var errTestCancel = fmt.Errorf("backendtest: %w", context.Canceled)

// reuser is the completer of the cancellation test: at the moment an
// operation is reported it takes the local memory back, as a caller would,
// and writes a fresh pattern into it; later checks find any byte of the
// operation that landed after the report.
type reuser struct {
	mu      sync.Mutex
	pattern map[*backend.WorkRequest]byte // victims' patterns, set at report
	ch      chan Result
}

func (r *reuser) Complete(wr *backend.WorkRequest, err error) {
	r.mu.Lock()
	if p, ok := r.pattern[wr]; ok {
		for i := range wr.Local {
			wr.Local[i] = p
		}
	}
	r.mu.Unlock()
	r.ch <- Result{wr, err}
}

// testCancel cancels operations and lets their deadlines pass at random
// points of their life while neighbours on the same route run: a victim's
// outcome is success (it finished first) or its cause; no byte of a victim
// touches its local memory after the report; every neighbour succeeds with
// the right bytes; the route stays up.
func testCancel(t *testing.T, f Factory) {
	c := &cancelRun{p: NewPair(t, f), f: f}
	maxLen := min(f.MaxSize, 512<<10)
	c.slot = maxLen
	c.hb, c.lb = Alloc(t, c.p.RegB, cancelPerRound*c.slot, buffer.AccessReadWrite)
	c.ha, c.la = Alloc(t, c.p.RegA, cancelPerRound*c.slot, buffer.AccessReadWrite)
	c.probeA, _ = Alloc(t, c.p.RegA, 64, buffer.AccessReadWrite)
	c.probeB, _ = Alloc(t, c.p.RegB, 64, buffer.AccessReadWrite)
	c.rng = mrand.New(mrand.NewPCG(7, uint64(time.Now().UnixNano())))
	c.rec = &reuser{pattern: make(map[*backend.WorkRequest]byte), ch: make(chan Result, cancelPerRound)}
	for round := range cancelRounds {
		c.round(t, round, maxLen)
	}
	if err := c.p.Route.Err(); err != nil {
		t.Fatalf("route failed: %v", err)
	}
	t.Logf("%d rounds: %d victim gets watched, %d victims ended early, 0 stale bytes", cancelRounds, c.victims, c.cancelled)
}

const cancelRounds, cancelPerRound = 40, 8

// cancelRun is the state of testCancel across its rounds.
type cancelRun struct {
	p              *Pair
	f              Factory
	slot           int // bytes of each job's range
	ha, hb         buffer.Buffer
	la, lb         []byte
	probeA, probeB buffer.Buffer
	rng            *mrand.Rand
	rec            *reuser

	victims, cancelled int
}

// cancelJob is one operation of a round: a victim (ended early by
// RequestCancel or by a short deadline) or a neighbour.
type cancelJob struct {
	wr      *backend.WorkRequest
	release func()
	off, n  int
	victim  bool
	byCtx   bool // ended by RequestCancel (else by its deadline)
}

// round posts cancelPerRound operations, ends the victims, and checks
// every outcome and every byte.
func (c *cancelRun) round(t *testing.T, round, maxLen int) {
	Random(t, c.lb)
	Random(t, c.la)
	remoteBefore := bytes.Clone(c.lb)
	jobs := make([]*cancelJob, cancelPerRound)
	for i := range jobs {
		jobs[i] = c.newJob(t, round, i, maxLen)
	}
	for _, j := range jobs {
		if err := c.p.Route.Post(j.wr); err != nil {
			if j.victim && errors.Is(err, rdmamgr.ErrDeadline) {
				c.rec.Complete(j.wr, err) // expired before it was posted: reported now
				continue
			}
			t.Fatalf("round %d: post: %v", round, err)
		}
	}
	for _, j := range jobs {
		if j.victim && j.byCtx {
			if d := c.rng.IntN(4); d > 0 {
				time.Sleep(time.Duration(c.rng.IntN(300*d)) * time.Microsecond)
			}
			j.wr.RequestCancel(errTestCancel)
			c.p.Route.Cancel(j.wr)
		}
	}
	seen := c.collect(t, round)
	for _, j := range jobs {
		c.checkJob(t, round, j, seen[j.wr], remoteBefore)
	}
	// A last op on the route orders behind every late byte of this
	// round on TCP (responses are read in order per connection).
	if err := Do(t, c.f.Timeout, c.p.Route, c.p.RegA, backend.OpRead, c.probeA, c.probeB); err != nil {
		t.Fatalf("round %d: op after the victims: %v", round, err)
	}
	if stale := c.stale(jobs); stale > 0 {
		t.Fatalf("round %d: %d stale bytes landed after their operation was reported", round, stale)
	}
}

// newJob builds job i of a round: even ones are victims; victim gets have
// the reuser write a pattern into their memory when they are reported.
func (c *cancelRun) newJob(t *testing.T, round, i, maxLen int) *cancelJob {
	n := 1 + c.rng.IntN(maxLen)
	off := i * c.slot
	op := backend.OpRead
	if c.rng.IntN(3) == 0 {
		op = backend.OpWrite
	}
	j := &cancelJob{off: off, n: n, victim: i%2 == 0, byCtx: c.rng.IntN(2) == 0}
	deadline := time.Now().Add(c.f.Timeout)
	if j.victim && !j.byCtx {
		deadline = time.Now().Add(time.Duration(c.rng.IntN(2000)) * time.Microsecond)
	}
	j.wr, j.release = NewWR(t, c.p.RegA, op, Slice(t, c.ha, off, n), Slice(t, c.hb, off, n), deadline, c.rec)
	if j.victim && op == backend.OpRead {
		c.rec.mu.Lock()
		c.rec.pattern[j.wr] = byte(0x80 | round&0x7f)
		c.rec.mu.Unlock()
		c.victims++
	}
	return j
}

// collect waits for the round's completions, each exactly once.
func (c *cancelRun) collect(t *testing.T, round int) map[*backend.WorkRequest]error {
	seen := make(map[*backend.WorkRequest]error, cancelPerRound)
	for range cancelPerRound {
		var res Result
		select {
		case res = <-c.rec.ch:
		case <-time.After(c.f.Timeout + 10*time.Second):
			t.Fatalf("round %d: completions missing", round)
		}
		if _, dup := seen[res.WR]; dup {
			t.Fatalf("round %d: a work request completed twice", round)
		}
		seen[res.WR] = res.Err
	}
	return seen
}

// checkJob checks one outcome: a neighbour succeeded with the right bytes;
// a victim succeeded or ended with its cause.
func (c *cancelRun) checkJob(t *testing.T, round int, j *cancelJob, err error, remoteBefore []byte) {
	switch {
	case !j.victim && err != nil:
		t.Fatalf("round %d: neighbour %s of %d bytes failed: %v", round, j.wr.Op, j.n, err)
	case j.victim && err != nil && !errors.Is(err, errTestCancel) && !errors.Is(err, rdmamgr.ErrDeadline):
		t.Fatalf("round %d: victim %s ended with %v, want its cause", round, j.wr.Op, err)
	case j.victim && err != nil:
		c.cancelled++
	}
	if j.victim {
		return
	}
	if j.wr.Op == backend.OpRead {
		AssertSame(t, "neighbour get", c.la[j.off:j.off+j.n], remoteBefore[j.off:j.off+j.n])
	} else {
		AssertSame(t, "neighbour put", c.lb[j.off:j.off+j.n], c.la[j.off:j.off+j.n])
	}
}

// stale counts the bytes of victims' memory that differ from the pattern
// written at their report, and releases the round's local references.
func (c *cancelRun) stale(jobs []*cancelJob) int {
	stale := 0
	c.rec.mu.Lock()
	defer c.rec.mu.Unlock()
	for _, j := range jobs {
		if pat, ok := c.rec.pattern[j.wr]; ok {
			stale += len(j.wr.Local) - bytes.Count(j.wr.Local, []byte{pat})
			delete(c.rec.pattern, j.wr)
		}
		j.release()
	}
	return stale
}
