//go:build linux

package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/proc"
	"github.com/rdmamgr/rdmamgr/internal/testscale"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// The data-plane attack suite (attack_data_*_test.go) runs each attack
// against a real `rdmamgr serve` process (a victim) while a legitimate
// client moves verified bytes through it, and checks the victim's RSS,
// file descriptors and goroutines during the attack and after it.
//
// The victim runs with GODEBUG=schedtrace,scheddetail, so the Go runtime
// lists its goroutines on stderr twice a second; atkSched counts the live
// ones and keeps the rest of stderr for diagnostics. A watchdog samples
// the victim every 100 ms and SIGKILLs it if its RSS passes atkRSSBound:
// that fails the test.

const (
	atkRSSBound   = 1 << 30 // bytes: the watchdog kills the victim above this
	atkSettle     = 30 * time.Second
	atkOpSize     = 64 << 10
	atkFDSlack    = 8  // fds above baseline still "back to baseline"
	atkGSlack     = 24 // goroutines likewise
	atkRSSSlackKB = 64 << 10
)

// atkSample is one look at the victim.
type atkSample struct {
	rssKB, fds, goroutines int
}

func (s atkSample) String() string {
	return fmt.Sprintf("rss %.1f MiB, %d fds, %d goroutines", float64(s.rssKB)/1024, s.fds, s.goroutines)
}

// atkVictim is a daemon under attack, with its watchdog.
type atkVictim struct {
	d        *daemon
	dataAddr string
	sched    *atkSched

	mu       sync.Mutex
	peak     atkSample
	killedBy string // set by the watchdog

	stopWatch chan struct{}
	watchDone chan struct{}
}

// atkStart spawns a victim (`rdmamgr serve` with extra flags), under
// prlimit --nofile when nofile > 0, and starts its watchdog. The victim is
// stopped (and must exit 0, unless the watchdog killed it) when the test
// ends.
func atkStart(t *testing.T, nofile int, extra ...string) *atkVictim {
	t.Helper()
	name := t.Name() + "/victim"
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--log-level", "warn"}, extra...)
	bin := rdmamgrBin
	if nofile > 0 {
		// The victim's limit, and the attacker's (which holds about as
		// many connections), come under this process's: a machine that
		// allows fewer cannot show the attack.
		if n := testscale.OpenFiles(); n < nofile {
			t.Skipf("needs an open-file limit of %d for the victim and the attacker; this process may open %d (ulimit -Hn)", nofile, n)
		}
		args = append([]string{fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--", rdmamgrBin}, args...)
		bin = "prlimit"
	}
	sched := &atkSched{keep: &proc.Buffer{}}
	d, err := spawn(proc.Spec{Name: name, Path: bin, Args: args, Env: []string{"GODEBUG=schedtrace=500,scheddetail=1"}, Stderr: sched}, sched.keep)
	if err != nil {
		t.Fatal(err)
	}
	v := &atkVictim{d: d, sched: sched, stopWatch: make(chan struct{}), watchDone: make(chan struct{})}
	go v.watch()
	t.Cleanup(func() {
		close(v.stopWatch)
		<-v.watchDone
		d.stop(t)
		v.mu.Lock()
		defer v.mu.Unlock()
		if v.killedBy != "" {
			t.Errorf("watchdog killed the victim: %s\nstderr:\n%s", v.killedBy, d.stderr)
		}
	})
	v.dataAddr = dataAddrFromStatus(t, d)
	return v
}

// watch samples the victim every 100 ms, keeps the peak and kills the
// victim if its RSS passes atkRSSBound.
func (v *atkVictim) watch() {
	defer close(v.watchDone)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-v.stopWatch:
			return
		case <-v.d.p.Done():
			return
		case <-tick.C:
		}
		s, err := v.sample()
		if err != nil {
			continue
		}
		v.mu.Lock()
		v.peak.rssKB = max(v.peak.rssKB, s.rssKB)
		v.peak.fds = max(v.peak.fds, s.fds)
		v.peak.goroutines = max(v.peak.goroutines, s.goroutines)
		kill := s.rssKB*1024 > atkRSSBound && v.killedBy == ""
		if kill {
			v.killedBy = fmt.Sprintf("RSS %d KiB over the bound of %d MiB", s.rssKB, atkRSSBound>>20)
		}
		v.mu.Unlock()
		if kill {
			_ = v.d.p.Kill() // on purpose: its exit status is not checked
			return
		}
	}
}

// sample reads the victim's RSS and fds from /proc and its goroutines
// from the last scheduler dump.
func (v *atkVictim) sample() (atkSample, error) {
	pid := v.d.p.Pid()
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return atkSample{}, err
	}
	var s atkSample
	for _, line := range strings.Split(string(st), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			s.rssKB, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return atkSample{}, err
	}
	s.fds = len(fds)
	s.goroutines = int(v.sched.last.Load())
	return s, nil
}

// resetPeak starts a new peak from now.
func (v *atkVictim) resetPeak() {
	v.mu.Lock()
	v.peak = atkSample{}
	v.mu.Unlock()
}

func (v *atkVictim) peakSample() atkSample {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.peak
}

// baseline waits for two scheduler dumps and returns a sample.
func (v *atkVictim) baseline(t *testing.T) atkSample {
	t.Helper()
	n := v.sched.dumps.Load()
	deadline := time.Now().Add(atkSettle)
	for v.sched.dumps.Load() < n+2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	s, err := v.sample()
	if err != nil {
		t.Fatalf("sample the victim: %v", err)
	}
	v.resetPeak()
	return s
}

// settle waits until the victim's fds and goroutines are back near base
// (and its RSS within atkRSSSlackKB of it), or atkSettle passes; it
// returns the last sample and fails the test if it is not near base.
func (v *atkVictim) settle(t *testing.T, base atkSample) atkSample {
	t.Helper()
	deadline := time.Now().Add(atkSettle)
	for {
		s, err := v.sample()
		if err != nil {
			t.Fatalf("sample the victim: %v", err)
		}
		near := s.fds <= base.fds+atkFDSlack && s.goroutines <= base.goroutines+atkGSlack && s.rssKB <= base.rssKB+atkRSSSlackKB
		if near {
			return s
		}
		if time.Now().After(deadline) {
			t.Errorf("victim not back to its baseline within %v: %v, baseline %v", atkSettle, s, base)
			return s
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// atkSched is the victim's stderr: it counts the live goroutines of each
// scheduler dump (GODEBUG scheddetail) and keeps the other lines.
type atkSched struct {
	keep  *proc.Buffer
	mu    sync.Mutex
	part  []byte // an incomplete line
	count int64  // live goroutines of the dump being read
	last  atomic.Int64
	dumps atomic.Int64
}

func (s *atkSched) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.part = append(s.part, p...)
	for {
		i := bytes.IndexByte(s.part, '\n')
		if i < 0 {
			break
		}
		line := s.part[:i]
		switch {
		case bytes.HasPrefix(line, []byte("SCHED ")):
			if s.dumps.Add(1) > 1 {
				s.last.Store(s.count)
			}
			s.count = 0
		case bytes.HasPrefix(line, []byte("  G")):
			if !bytes.Contains(line, []byte("status=6(")) {
				s.count++
			}
		case bytes.HasPrefix(line, []byte("  P")), bytes.HasPrefix(line, []byte("  M")):
		default:
			_, _ = s.keep.Write(append(line, '\n'))
		}
		s.part = s.part[i+1:]
	}
	s.part = append([]byte(nil), s.part...)
	return len(p), nil
}

// atkLegit is the legitimate client of a victim: a queue pair from the
// test's manager, a read-write buffer at the victim and local buffers.
type atkLegit struct {
	v        *atkVictim
	qp       *queuepair.QueuePair
	remote   buffer.Buffer
	src, dst buffer.Buffer
	srcMem   []byte
	dstMem   []byte

	ops, bytes, errs atomic.Int64
	busy             atomic.Int64 // nanoseconds spent in bench
	firstErr         atomic.Pointer[error]
}

func atkNewLegit(t *testing.T, v *atkVictim) *atkLegit {
	t.Helper()
	l := &atkLegit{v: v}
	l.remote = remoteBuffer(t, v.d, atkOpSize, buffer.AccessReadWrite)
	l.src, l.srcMem = localBuffer(t, atkOpSize)
	l.dst, l.dstMem = localBuffer(t, atkOpSize)
	l.qp = queuePair(t, v.d)
	if err := l.putGet(byte(1)); err != nil {
		t.Fatalf("legitimate put/get before the attack: %v", err)
	}
	return l
}

// putGet puts a pattern into the victim's buffer, gets it back and
// compares. Used by one goroutine at a time.
func (l *atkLegit) putGet(seed byte) error {
	for i := range l.srcMem {
		l.srcMem[i] = seed + byte(i*7)
	}
	clear(l.dstMem)
	if err := wait(l.qp.Put(context.Background(), l.src, l.remote)); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	if err := wait(l.qp.Get(context.Background(), l.dst, l.remote)); err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if !bytes.Equal(l.srcMem, l.dstMem) {
		return fmt.Errorf("verify: %s", firstDiff(l.dstMem, l.srcMem))
	}
	return nil
}

// bench runs verified put/gets until ctx ends or max ops; errors are
// counted, the first kept.
func (l *atkLegit) bench(ctx context.Context, max int) {
	start := time.Now()
	defer func() { l.busy.Add(int64(time.Since(start))) }()
	for i := 0; i < max && ctx.Err() == nil; i++ {
		if err := l.putGet(byte(i)); err != nil {
			l.errs.Add(1)
			l.firstErr.CompareAndSwap(nil, &err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l.ops.Add(1)
		l.bytes.Add(2 * atkOpSize)
	}
}

// report logs the figures of one attack in one line, and fails the test
// if the legitimate client saw an error or moved nothing.
func (l *atkLegit) report(t *testing.T, attack string, base, peak, after atkSample, d time.Duration) {
	t.Helper()
	ops, by, busy := l.ops.Load(), l.bytes.Load(), time.Duration(l.busy.Load())
	rate := 0.0
	if busy > 0 {
		rate = float64(by) / (1 << 20) / busy.Seconds()
	}
	t.Logf("FIGURES %s (%v): baseline %v | peak during %v | after %v | legitimate bench alongside: %d verified put+get of %d KiB, %.1f MiB/s over %v, %d errors",
		attack, d.Round(time.Millisecond), base, peak, after, ops, atkOpSize>>10, rate, busy.Round(time.Millisecond), l.errs.Load())
	if e := l.firstErr.Load(); e != nil {
		t.Errorf("legitimate client failed during the attack: %v (%d errors)", *e, l.errs.Load())
	}
	if ops == 0 {
		t.Errorf("legitimate client moved nothing during the attack")
	}
}

// atkNothingGranted checks that the victim holds only the legitimate
// client's buffers (wantBuffers of them).
func atkNothingGranted(t *testing.T, v *atkVictim, wantBuffers int) {
	t.Helper()
	st, err := v.d.client().Status(testCtx(t, 30*time.Second))
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if len(st.Buffers) != wantBuffers {
		t.Errorf("victim holds %d buffers, want %d", len(st.Buffers), wantBuffers)
	}
	if strings.Contains(st.DataAddr, "down") {
		t.Errorf("status data address %q", st.DataAddr)
	}
}
