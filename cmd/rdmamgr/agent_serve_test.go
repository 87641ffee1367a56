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
	if !strings.Contains(log, "agent="+sock) || !strings.Contains(log, "backend=tcp") {
		t.Fatalf("serving line without the agent or with another backend:\n%s", log)
	}
	d.stop(t)
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("agent socket after SIGTERM: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, stderr, code := runBin(t, ctx, "serve", "--listen", "127.0.0.1:0", "--agent-socket", sock, "--agent-routes", "0"); code != 2 || !strings.Contains(stderr, "--agent-routes") {
		t.Fatalf("--agent-routes 0: exit %d, stderr:\n%s", code, stderr)
	}
}
