package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// serve --agent-socket runs the host's agent: the socket is there (mode
// 0660) while it serves, the serving line names it, the backend is TCP
// alone, and SIGTERM removes the socket. A bad --agent-routes is a usage
// error.
func TestServeAgentSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the host agent is Linux only")
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	d := startDaemon(t, "--agent-socket", sock, "--agent-routes", "2")
	st, err := os.Stat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o660 {
		t.Fatalf("agent socket: %v %v", st, err)
	}
	log := d.stderr.String()
	if !strings.Contains(log, "agent_socket="+sock) || !strings.Contains(log, "backend=tcp") {
		t.Fatalf("serving line without the agent or with another backend:\n%s", log)
	}
	d.stop(t)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("agent socket after SIGTERM: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, stderr, code := runBin(t, ctx, "serve", "--listen", "127.0.0.1:0", "--agent-socket", sock, "--agent-routes", "1"); code != 2 || !strings.Contains(stderr, "--agent-routes") {
		t.Fatalf("--agent-routes 1: exit %d, stderr:\n%s", code, stderr)
	}
}

// Real processes, killed: a process daemon attached to an agent daemon is
// killed (SIGKILL) and the agent drops it; the agent is killed and the
// process daemon says its agent went; an agent restarted on the same
// socket (the dead one's file replaced) takes the process back without
// restarting it.
func TestServeAgentKills(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the host agent is Linux only")
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	agent := startDaemon(t, "--agent-socket", sock)
	proc := startDaemon(t, "--agent", sock)
	waitLog(t, agent, "process attached")
	proc.kill()
	waitLog(t, agent, "process detached")

	proc = startDaemon(t, "--agent", sock)
	waitLog(t, agent, "process attached")
	agent.kill()
	waitLog(t, proc, "host agent gone")
	agent = startDaemon(t, "--agent-socket", sock)
	waitLog(t, agent, "process attached")
	waitLogN(t, proc, "attached to the host agent", 2) // at its start, and again
}

// waitLog waits until d's stderr has what (the test's bound).
func waitLog(t *testing.T, d *daemon, what string) {
	t.Helper()
	waitLogN(t, d, what, 1)
}

// waitLogN waits until d's stderr has what n times.
func waitLogN(t *testing.T, d *daemon, what string, n int) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if strings.Count(d.stderr.String(), what) >= n {
			return
		}
	}
	t.Fatalf("%q not %d times in the log:\n%s", what, n, d.stderr)
}
