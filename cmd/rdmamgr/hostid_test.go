package main

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The Soft-RoCE VM's scenario (test/softroce/managers-guest.sh) on TCP:
// two agents in one kernel named hosts A and B by --host-id, a process of
// B serving, and bench of A moving verified bytes to and from it through
// both agents (not shm, though all share a kernel); agent A's route to
// agent B says its backend. A process of B does not attach to A's agent.
func TestServeAgentsHostID(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the host agent is Linux only")
	}
	dir := t.TempDir()
	sa, sb := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	agentA := startDaemon(t, "--agent-socket", sa, "--host-id", "A", "--backend", "tcp")
	agentB := startDaemon(t, "--agent-socket", sb, "--host-id", "B", "--backend", "tcp")
	procB := startDaemon(t, "--agent", sb, "--host-id", "B")
	waitLog(t, procB, "attached to the host agent")
	stray := startDaemon(t, "--agent", sa, "--host-id", "B")
	waitLog(t, stray, "no host agent")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, op := range []string{"put", "get"} {
		out, stderr, code := runBin(t, ctx, "bench", "--agent", sa, "--host-id", "A", "--peer", procB.addr,
			"--op", op, "--size", "256KiB", "--count", "8", "--concurrency", "2", "--verify", "--log-level", "info")
		if code != 0 || !strings.Contains(out, "backend=agent") || !strings.Contains(out, "verify: ok") {
			t.Fatalf("bench %s: exit %d, want backend=agent and verify: ok\n%s\n%s", op, code, out, stderr)
		}
		// Its route's reason names the agents' route's backend.
		if !strings.Contains(out+stderr, "at agent "+agentB.addr+") over tcp") {
			t.Fatalf("bench %s: its route's why does not end in 'via host agent (slot N at agent %s) over tcp'\n%s\n%s", op, agentB.addr, out, stderr)
		}
	}
	waitLog(t, agentA, "route up backend=tcp")
	if log := agentA.stderr.String(); !strings.Contains(log, "peer="+agentB.addr) {
		t.Fatalf("agent A's log names no route to agent B (%s):\n%s", agentB.addr, log)
	}
}
