//go:build linux

package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/ibverbs"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// Agent mode: ibverbs and TCP (TCP alone in a build or on a machine
// without ibverbs), the agent's address is the node's, the socket is
// there while the node runs and gone after Close; shm, and being an agent
// and attached to one, are refused.
func TestHostAgentMode(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	n := startNode(t, Config{HostAgent: HostAgent{Socket: sock, Routes: 2}})
	if want := agentBackends(); n.Backends() != want || n.AgentAddr() != n.Addr() {
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
	if c, err := (Config{HostAgent: HostAgent{Socket: sock}}).withDefaults(); err != nil || c.TCP.ConnsPerRoute != 2 || c.HostAgent.Routes != 4 || c.Backend != KindAuto {
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

// agentBackends is what an agent runs under auto here: ibverbs where this
// build has it and a device is there, then TCP.
func agentBackends() string {
	if b, err := startIBVerbs(context.Background(), ibverbs.DefaultConfig(), memreg.NewRegistry(1, buffer.Limits{}), nil); err == nil {
		b.Close()
		if wiring.SetResolver(b, nil) {
			return "ibverbs+tcp"
		}
	}
	return "tcp"
}

// An agent runs ibverbs only if its ibverbs backend serves far agents'
// frames for the agent's processes (takes a resolver): a backend that does
// not is closed and refused with ErrNotSupported (auto leaves it out, a
// named one fails Start); the TCP backend takes one.
func TestAgentIBVerbsNeedsAResolver(t *testing.T) {
	nb := &noResolver{}
	if b, err := agentIBVerbs(nb); b != nil || !errors.Is(err, rdmamgr.ErrNotSupported) || !nb.closed {
		t.Fatalf("a backend without a resolver: %v, %v (closed %v)", b, err, nb.closed)
	}
	reg := memreg.NewRegistry(1, buffer.Limits{})
	tb, err := wiring.NewBackend[*tcp.Backend](tcp.Config{ListenAddr: "127.0.0.1:0"}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if b, err := agentIBVerbs(tb); b != tb || err != nil {
		t.Fatalf("tcp: %v, %v", b, err)
	}
}

// noResolver is a backend that takes no resolver.
type noResolver struct {
	backend.Backend
	closed bool
}

func (n *noResolver) Close() error { n.closed = true; return nil }
