package node

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
)

// A node told of an agent that is not there starts at once, runs the
// agent backend after shm, and its routes go direct: the route's reason
// says why not through the agent.
func TestAgentAbsentGoesDirect(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shm and the agent need Linux")
	}
	ctx := testCtx(t)
	start := time.Now()
	a := startNode(t, Config{Backend: backend.KindSHM, Agent: filepath.Join(t.TempDir(), "no-agent.sock")})
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("Start took %v without an agent", d)
	}
	if got := a.Backends(); got != "shm+agent+tcp" {
		t.Fatalf("backends %q", got)
	}
	b := startNode(t, Config{Backend: backend.KindTCP})
	qp, err := a.Client().RequestQueuePair(ctx, a.ClientOf(b.Addr(), "").PID())
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Release()
	if k := qp.Kind(); k != backend.KindTCP {
		t.Fatalf("queue pair on %s, want tcp", k)
	}
	st, err := a.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Routes) != 1 || !strings.Contains(st.Routes[0].Why, "agent: not attached to a host agent") {
		t.Fatalf("routes %v: want the agent's reason", st.Routes)
	}
}
