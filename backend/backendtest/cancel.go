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
	p := NewPair(t, f)
	const rounds, perRound = 40, 8
	maxLen := min(f.MaxSize, 512<<10)
	slot := maxLen
	hb, lb := Alloc(t, p.RegB, perRound*slot, buffer.AccessReadWrite)
	ha, la := Alloc(t, p.RegA, perRound*slot, buffer.AccessReadWrite)
	probeA, _ := Alloc(t, p.RegA, 64, buffer.AccessReadWrite)
	probeB, _ := Alloc(t, p.RegB, 64, buffer.AccessReadWrite)
	rng := mrand.New(mrand.NewPCG(7, uint64(time.Now().UnixNano())))
	rec := &reuser{pattern: make(map[*backend.WorkRequest]byte), ch: make(chan Result, perRound)}
	var victims, cancelled, stale int
	for round := range rounds {
		Random(t, lb)
		Random(t, la)
		remoteBefore := snapshot(lb)
		type job struct {
			wr      *backend.WorkRequest
			release func()
			off, n  int
			victim  bool
			byCtx   bool // ended by RequestCancel (else by its deadline)
		}
		jobs := make([]*job, perRound)
		for i := range jobs {
			n := 1 + rng.IntN(maxLen)
			off := i * slot
			op := backend.OpRead
			if rng.IntN(3) == 0 {
				op = backend.OpWrite
			}
			j := &job{off: off, n: n, victim: i%2 == 0, byCtx: rng.IntN(2) == 0}
			deadline := time.Now().Add(f.Timeout)
			if j.victim && !j.byCtx {
				deadline = time.Now().Add(time.Duration(rng.IntN(2000)) * time.Microsecond)
			}
			j.wr, j.release = NewWR(t, p.RegA, op, Slice(t, ha, off, n), Slice(t, hb, off, n), deadline, rec)
			if j.victim && op == backend.OpRead {
				rec.mu.Lock()
				rec.pattern[j.wr] = byte(0x80 | round&0x7f)
				rec.mu.Unlock()
				victims++
			}
			jobs[i] = j
		}
		for _, j := range jobs {
			if err := p.Route.Post(j.wr); err != nil {
				if j.victim && errors.Is(err, backend.ErrDeadline) {
					rec.Complete(j.wr, err) // expired before it was posted: reported now
					continue
				}
				t.Fatalf("round %d: post: %v", round, err)
			}
		}
		for _, j := range jobs {
			if j.victim && j.byCtx {
				if d := rng.IntN(4); d > 0 {
					time.Sleep(time.Duration(rng.IntN(300*d)) * time.Microsecond)
				}
				j.wr.RequestCancel(errTestCancel)
				p.Route.Cancel(j.wr)
			}
		}
		seen := make(map[*backend.WorkRequest]error, perRound)
		for range perRound {
			var res Result
			select {
			case res = <-rec.ch:
			case <-time.After(f.Timeout + 10*time.Second):
				t.Fatalf("round %d: completions missing", round)
			}
			if _, dup := seen[res.WR]; dup {
				t.Fatalf("round %d: a work request completed twice", round)
			}
			seen[res.WR] = res.Err
		}
		for _, j := range jobs {
			err := seen[j.wr]
			switch {
			case !j.victim && err != nil:
				t.Fatalf("round %d: neighbour %s of %d bytes failed: %v", round, j.wr.Op, j.n, err)
			case j.victim && err != nil && !errors.Is(err, errTestCancel) && !errors.Is(err, backend.ErrDeadline):
				t.Fatalf("round %d: victim %s ended with %v, want its cause", round, j.wr.Op, err)
			case j.victim && err != nil:
				cancelled++
			}
			if j.victim {
				continue
			}
			if j.wr.Op == backend.OpRead {
				AssertSame(t, "neighbour get", la[j.off:j.off+j.n], remoteBefore[j.off:j.off+j.n])
			} else {
				AssertSame(t, "neighbour put", lb[j.off:j.off+j.n], la[j.off:j.off+j.n])
			}
		}
		// A last op on the route orders behind every late byte of this
		// round on TCP (responses are read in order per connection).
		if err := Do(t, f.Timeout, p.Route, p.RegA, backend.OpRead, probeA, probeB); err != nil {
			t.Fatalf("round %d: op after the victims: %v", round, err)
		}
		rec.mu.Lock()
		for _, j := range jobs {
			if pat, ok := rec.pattern[j.wr]; ok {
				stale += len(j.wr.Local) - bytes.Count(j.wr.Local, []byte{pat})
				delete(rec.pattern, j.wr)
			}
			j.release()
		}
		rec.mu.Unlock()
		if stale > 0 {
			t.Fatalf("round %d: %d stale bytes landed after their operation was reported", round, stale)
		}
	}
	if err := p.Route.Err(); err != nil {
		t.Fatalf("route failed: %v", err)
	}
	t.Logf("%d rounds: %d victim gets watched, %d victims ended early, 0 stale bytes", rounds, victims, cancelled)
}
