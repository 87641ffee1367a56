//go:build linux

package test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// atkStuckLease is the victim's lease on the buffers the stopped bench
// requests.
const atkStuckLease = 6 * time.Second

// (issue 24, row 5) A `rdmamgr bench` over shm is stopped (SIGSTOP) in the
// middle of a copy into the victim's buffer, its count in flight up. The
// buffer's lease runs out, then another peer's: both take effect at once
// (the stuck release returns within its bound, 2 s after the cut, and
// does not hold the other's), and a verified legitimate bench runs
// alongside without an error. Before, the reaper waited the 30 s
// operation timeout for each stuck buffer in turn, and the other peer's
// lease took effect only after that.
func TestAttackSHMStoppedPeer(t *testing.T) {
	v := atkStart(t, 0, "--remote-lease", atkStuckLease.String())
	l := atkLegitLeased(t, v)
	st0, err := v.d.client().Status(testCtx(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	base := v.baseline(t)
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	benchDone := make(chan struct{})
	go func() { defer close(benchDone); l.bench(ctx, 1000000) }()
	t.Cleanup(func() { cancel(); <-benchDone }) // before its buffers go

	cmd := exec.Command(rdmamgrBin, "bench", "--peer", v.d.addr, "--backend", "shm", "--op", "put",
		"--size", "64MiB", "--count", "100000000", "--max-errors", "100000000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	started := time.Now()
	stopped := false
	for i := 0; !stopped && time.Since(started) < atkStuckLease-time.Second; i++ {
		if copiesInFlight(cmd.Process.Pid) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(50 * time.Millisecond)
		if stopped = copiesInFlight(cmd.Process.Pid) > 0; !stopped {
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	if !stopped {
		t.Skip("never caught the bench mid-copy before its lease ran out (a loaded machine): nothing to show")
	}
	t.Logf("bench stopped mid-copy %v after it started", time.Since(started).Round(time.Millisecond))
	st, err := v.d.client().Status(testCtx(t, 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if st.BuffersTotal <= st0.BuffersTotal {
		t.Fatalf("the bench holds no buffer at the victim (%d, before %d)", st.BuffersTotal, st0.BuffersTotal)
	}
	// Another peer's buffer, whose lease ends after the stuck ones': its
	// expiry must not wait behind theirs (the old reaper waited 30 s per
	// stuck buffer, in turn).
	other, err := v.d.client().RequestLeasedBuffer(testCtx(t, 30*time.Second), 4096, buffer.AccessReadWrite, atkStuckLease)
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(atkStuckLease)
	for listed(st, other.Region) || st.BuffersTotal > st0.BuffersTotal {
		if time.Now().After(end.Add(20 * time.Second)) {
			t.Fatalf("leases did not take effect: %v past the last one's end, %d buffers (%d before), the other peer's listed: %v",
				time.Since(end).Round(time.Second), st.BuffersTotal, st0.BuffersTotal, listed(st, other.Region))
		}
		time.Sleep(200 * time.Millisecond)
		if st, err = v.d.client().Status(testCtx(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("every lease took effect (the stopped bench's and another peer's) within %v of the last one's end", max(0, time.Since(end)).Round(100*time.Millisecond))
	peak := v.peakSample()
	cancel()
	<-benchDone
	_ = cmd.Process.Kill()
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Wait()
	after := v.settle(t, base)
	l.report(t, "shm peer stopped mid-copy", base, peak, after, time.Since(start))
	verifiedBench(t, v, "shm", 100)
}

// atkLegitLeased is atkNewLegit with a remote buffer leased for long (the
// victim's default lease is short here).
func atkLegitLeased(t *testing.T, v *atkVictim) *atkLegit {
	t.Helper()
	l := &atkLegit{v: v}
	var err error
	l.remote, err = v.d.client().RequestLeasedBuffer(testCtx(t, 30*time.Second), atkOpSize, buffer.AccessReadWrite, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	l.src, l.srcMem = localBuffer(t, atkOpSize)
	l.dst, l.dstMem = localBuffer(t, atkOpSize)
	l.qp = queuePair(t, v.d)
	if err := l.putGet(1); err != nil {
		t.Fatalf("legitimate put/get before the attack: %v", err)
	}
	return l
}

// copiesInFlight reads the counts of copies in flight from the shm state
// tables process pid maps (memfd "rdmamgr-shm-table"; word 3 of each
// 32-byte slot but the first), through /proc/PID/mem; 0 if none.
func copiesInFlight(pid int) uint64 {
	maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0
	}
	defer maps.Close()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return 0
	}
	defer mem.Close()
	var n uint64
	s := bufio.NewScanner(maps)
	for s.Scan() {
		if !strings.Contains(s.Text(), "rdmamgr-shm-table") {
			continue
		}
		lo, hi, _ := strings.Cut(strings.Fields(s.Text())[0], "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || b <= a || b-a > 1<<20 {
			continue
		}
		tbl := make([]byte, b-a)
		if _, err := mem.ReadAt(tbl, int64(a)); err != nil {
			continue
		}
		for off := 32; off+32 <= len(tbl); off += 32 {
			n += binary.LittleEndian.Uint64(tbl[off+24:])
		}
	}
	return n
}

// listed reports whether status st lists region id.
func listed(st *rdmapb.StatusResponse, id uint64) bool {
	for _, b := range st.Buffers {
		if b.Region == id {
			return true
		}
	}
	return false
}
