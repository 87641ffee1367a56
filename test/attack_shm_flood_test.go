//go:build linux

package test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Bounds the shm backend keeps on its socket (backend/shm/admit.go): at
// most 64 connections before authentication, 16 of them per user.
const atkSHMPreAuth = 64

// (issue 24, row 3) A process of another user (nobody) floods the
// victim's abstract shm socket with connections it never authenticates.
// The victim refuses them at accept (a user it does not serve; the
// pre-auth caps): its fds stay bounded, and verified shm and TCP benches
// from a legitimate process pass during the flood. Before the caps every
// connection took an fd and a goroutine until the handshake timed out:
// fds ran to the victim's limit and the legitimate benches failed
// (memfd_create: too many open files).
func TestAttackSHMSocketFlood(t *testing.T) {
	v := atkStart(t, 4096)
	sock := shmSocketOf(t, v.d.p.Pid())
	verifiedBench(t, v, "shm", 200)
	base := v.baseline(t)
	start := time.Now()

	a := startHostileProc(t, "shm-flood", sock)
	var last string
	deadline := time.Now().Add(atkSettle)
	for held := 0; held < 3000; {
		l, ok := <-a.lines
		if !ok || time.Now().After(deadline) {
			t.Fatalf("the attacker got nowhere: %q", last)
		}
		last = l
		var failed int
		if _, err := fmt.Sscanf(l, "held %d failed %d", &held, &failed); err != nil {
			t.Fatalf("attacker said %q: %v", l, err)
		}
	}
	t.Logf("attacker (uid %d) holds: %s", nobody, last)

	shm := verifiedBench(t, v, "shm", 500)
	tcp := verifiedBench(t, v, "tcp", 200)
	peak := v.peakSample()
	a.stop(t)
	after := v.settle(t, base)
	t.Logf("FIGURES shm socket flood by uid %d (%v): baseline %v | peak during %v | after %v | legitimate benches during the flood: shm %d and tcp %d verified puts of 64 KiB, 0 errors",
		nobody, time.Since(start).Round(time.Millisecond), base, peak, after, shm.Ops, tcp.Ops)
	if bound := base.fds + atkSHMPreAuth + 2*atkFDSlack; peak.fds > bound {
		t.Errorf("victim's fds peaked at %d during the flood (baseline %d): want at most %d", peak.fds, base.fds, bound)
	}
	// Refusals are logged once a second at most (issue 24, row 12).
	lines := strings.Count(v.d.stderr.String(), "shm connection refused")
	if secs := int(time.Since(start)/time.Second) + 2; lines > secs {
		t.Errorf("victim logged %d shm refusals in %v: want at most one a second", lines, time.Since(start).Round(time.Second))
	}
}
