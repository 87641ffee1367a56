//go:build linux

package test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// The control-plane attack suite's victim: a daemon sampled by a watchdog
// (RSS, file descriptors, threads from /proc; goroutines from status) that
// kills it if its RSS passes attackRSSBound.

// procSample is what the watchdog reads of a victim.
type procSample struct {
	rss        uint64 // bytes
	fds        int
	threads    int
	goroutines uint64 // from status; 0 when status did not answer
}

func (s procSample) String() string {
	return fmt.Sprintf("RSS %.1f MiB, %d fds, %d threads, %d goroutines", float64(s.rss)/(1<<20), s.fds, s.threads, s.goroutines)
}

// readProc reads RSS, threads and fds of process pid.
func readProc(pid int) (procSample, error) {
	var s procSample
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseUint(f[0], 10, 64)
		switch k {
		case "VmRSS":
			s.rss = n << 10
		case "Threads":
			s.threads = int(n)
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.fds = len(ents)
	return s, nil
}

// victim is a daemon under attack and its watchdog.
type victim struct {
	d *daemon

	mu       sync.Mutex // guards peak and killedAt
	peak     procSample
	killedAt uint64 // RSS at which the watchdog killed it (0: alive)

	stop chan struct{}
	done chan struct{}
}

// watchVictim starts the watchdog on d; it stops when the test ends.
func watchVictim(t *testing.T, d *daemon) *victim {
	t.Helper()
	v := &victim{d: d, stop: make(chan struct{}), done: make(chan struct{})}
	go v.watch()
	t.Cleanup(func() {
		v.halt()
		if rss := v.killed(); rss > 0 {
			t.Errorf("%s: the watchdog killed the victim at RSS %d MiB (bound %d MiB)", d.name, rss>>20, attackRSSBound>>20)
		}
	})
	return v
}

func (v *victim) halt() {
	select {
	case <-v.stop:
	default:
		close(v.stop)
	}
	<-v.done
}

func (v *victim) killed() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.killedAt
}

func (v *victim) watch() {
	defer close(v.done)
	pid := v.d.p.Pid()
	// Goroutines come from status, on their own goroutine so that a slow
	// answer never delays the RSS check.
	var gs atomic.Uint64
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-v.stop:
				return
			case <-v.d.p.Done():
				return
			case <-tick.C:
			}
			if st, err := victimStatus(v.d, 2*time.Second); err == nil {
				gs.Store(st.Goroutines)
			}
		}
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-v.d.p.Done():
			return
		case <-tick.C:
		}
		s, err := readProc(pid)
		if err != nil {
			continue
		}
		if s.rss > attackRSSBound {
			v.mu.Lock()
			v.killedAt = s.rss
			v.mu.Unlock()
			_ = v.d.p.Kill() // on purpose: its exit status is not checked
			return
		}
		s.goroutines = gs.Load()
		v.mu.Lock()
		v.peak.rss = max(v.peak.rss, s.rss)
		v.peak.fds = max(v.peak.fds, s.fds)
		v.peak.threads = max(v.peak.threads, s.threads)
		v.peak.goroutines = max(v.peak.goroutines, s.goroutines)
		v.mu.Unlock()
	}
}

// resetPeak starts a new peak (at the start of an attack).
func (v *victim) resetPeak() {
	v.mu.Lock()
	v.peak = procSample{}
	v.mu.Unlock()
}

func (v *victim) peakSample() procSample {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.peak
}

// sampleNow reads the victim's figures at once, goroutines included.
func (v *victim) sampleNow(t *testing.T) procSample {
	t.Helper()
	s, err := readProc(v.d.p.Pid())
	if err != nil {
		t.Fatalf("%s: read /proc: %v", v.d.name, err)
	}
	st, err := victimStatus(v.d, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: status: %v", v.d.name, err)
	}
	s.goroutines = st.Goroutines
	return s
}

// settle waits until the victim's figures are back near base and returns
// them; it fails the test if they do not come back within attackSettle.
func (v *victim) settle(t *testing.T, base procSample) procSample {
	t.Helper()
	deadline := time.Now().Add(attackSettle)
	for {
		s := v.sampleNow(t)
		ok := s.rss <= base.rss+attackRSSSlack && s.fds <= base.fds+attackFDSlack &&
			s.goroutines <= base.goroutines+attackGoroutinesSlack
		if ok {
			return s
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: not back to baseline within %v: %v, baseline %v", v.d.name, attackSettle, s, base)
			return s
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// victimStatus asks d for its status from the test's node.
func victimStatus(d *daemon, timeout time.Duration) (*rdmapb.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.client().Status(ctx)
}
