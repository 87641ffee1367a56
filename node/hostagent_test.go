//go:build linux

package node

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// Agent mode: TCP alone, the agent's address is the node's, the socket is
// there while the node runs and gone after Close; a backend other than
// TCP, and being an agent and attached to one, are refused.
func TestHostAgentMode(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	n := startNode(t, Config{HostAgent: HostAgent{Socket: sock, Routes: 2}})
	if n.Backends() != "tcp" || n.AgentAddr() != n.Addr() {
		t.Fatalf("backends %q, agent %q, node %q", n.Backends(), n.AgentAddr(), n.Addr())
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket after Close: %v", err)
	}
	ctx := testCtx(t)
	if _, err := Start(ctx, Config{HostAgent: HostAgent{Socket: sock}, Backend: backend.KindSHM}); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("agent with shm: %v", err)
	}
	if _, err := Start(ctx, Config{HostAgent: HostAgent{Socket: sock}, Agent: sock + ".other"}); !errors.Is(err, rdmamgr.ErrInvalid) {
		t.Fatalf("agent attached to an agent: %v", err)
	}
	if c, err := (Config{HostAgent: HostAgent{Socket: sock}}).withDefaults(); err != nil || c.TCP.ConnsPerRoute != 2 || c.HostAgent.Routes != 4 || c.Backend != backend.KindTCP {
		t.Fatalf("defaults: %d conns per route, %d per pair, backend %s, %v", c.TCP.ConnsPerRoute, c.HostAgent.Routes, c.Backend, err)
	}
	if c, err := (Config{HostAgent: HostAgent{Socket: sock, Routes: 5}}).withDefaults(); err != nil || c.TCP.ConnsPerRoute != 3 {
		t.Fatalf("5 per pair: %d conns per route, %v", c.TCP.ConnsPerRoute, err)
	}
	for _, n := range []int{1, -1} {
		if _, err := (Config{HostAgent: HostAgent{Socket: sock, Routes: n}}).withDefaults(); !errors.Is(err, rdmamgr.ErrInvalid) {
			t.Fatalf("%d per pair: %v", n, err)
		}
	}
}
