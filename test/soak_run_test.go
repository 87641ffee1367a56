//go:build linux

// TestSoak's shared state: the figures the workers and the killer add to,
// which errors a kill explains and how each outcome is recorded, the
// killer that SIGKILLs and restarts daemons, and the progress log.

package test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
)

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
// are named (a CLOSED reply wraps rdmamgr.ErrClosed and rdmamgr.ErrClosed).
var soakAllowed = []struct {
	name string
	err  error
}{
	{"rdmamgr.ErrPeerGone", rdmamgr.ErrPeerGone},
	{"rdmamgr.ErrDeadline", rdmamgr.ErrDeadline},
	{"rdmamgr.ErrClosed", rdmamgr.ErrClosed},
	{"rdmamgr.ErrUnknownPeer", rdmamgr.ErrUnknownPeer},
	{"rdmamgr.ErrTimeout", rdmamgr.ErrTimeout},
	{"rdmamgr.ErrReleased", rdmamgr.ErrReleased},
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
