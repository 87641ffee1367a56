//go:build linux

package node

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Config.HostID splits one kernel into hosts: nodes of different ids are
// not on one host for shm (the route goes to the next backend and says
// why), nodes of one id are.
func TestHostIDSplitsSHM(t *testing.T) {
	ctx := testCtx(t)
	a := startNode(t, Config{HostID: "A"})
	b := startNode(t, Config{HostID: "B"})
	c := startNode(t, Config{HostID: "A"})
	for _, tc := range []struct {
		peer *Node
		kind backend.Kind
		why  string
	}{{b, backend.KindTCP, "peer is not on this host"}, {c, backend.KindSHM, "first choice"}} {
		qp, err := a.Client().RequestQueuePair(ctx, a.ClientOf(tc.peer.Addr(), "").PID())
		if err != nil {
			t.Fatal(err)
		}
		defer qp.Release()
		if k := qp.Kind(); k != tc.kind {
			t.Fatalf("queue pair to %s on %s, want %s", tc.peer.Addr(), k, tc.kind)
		}
		moveBoth(t, a, tc.peer, qp)
	}
	st, err := a.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var whys []string
	for _, r := range st.Routes {
		whys = append(whys, r.Why)
	}
	if len(whys) != 2 || !strings.Contains(strings.Join(whys, "|"), "peer is not on this host") {
		t.Fatalf("route reasons %q: want one to say shm refused the other host", whys)
	}
}

// Two agents in one kernel, each with its processes under their own
// Config.HostID (the Soft-RoCE VM's rig, test/softroce): processes of
// different ids go through both agents, processes of one id stay on shm,
// and a process attaches only to an agent of its own id.
func TestHostIDAgents(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	sa, sb := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	agentA := startNode(t, Config{HostID: "A", HostAgent: HostAgent{Socket: sa}})
	agentB := startNode(t, Config{HostID: "B", HostAgent: HostAgent{Socket: sb}})
	p1 := startNode(t, Config{HostID: "A", Agent: sa})
	p2 := startNode(t, Config{HostID: "B", Agent: sb})
	p3 := startNode(t, Config{HostID: "A", Agent: sa})
	startNode(t, Config{HostID: "B", Agent: sa}) // another host's process: not attached
	if n, m := agentA.agent.Procs(), agentB.agent.Procs(); n != 2 || m != 1 {
		t.Fatalf("agent A serves %d processes, B %d: want 2 and 1 (a process of host B attached to A's agent)", n, m)
	}
	for _, tc := range []struct {
		peer *Node
		kind backend.Kind
	}{{p2, backend.KindAgent}, {p3, backend.KindSHM}} {
		qp, err := p1.Client().RequestQueuePair(ctx, p1.ClientOf(tc.peer.Addr(), "").PID())
		if err != nil {
			t.Fatal(err)
		}
		defer qp.Release()
		if k := qp.Kind(); k != tc.kind {
			t.Fatalf("queue pair to %s on %s, want %s", tc.peer.Addr(), k, tc.kind)
		}
		moveBoth(t, p1, tc.peer, qp)
	}
	st, err := p1.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range st.Routes {
		found = found || strings.Contains(r.Why, "peer is not on this host") && strings.Contains(r.Why, "via host agent")
	}
	if !found {
		t.Fatalf("routes %v: want one that passed over shm and went via the host agents", st.Routes)
	}
}

// A process attached to a host agent runs no ibverbs of its own (its agent
// maps its memfds, which a device's registration would pin: memreg
// exports nothing then): auto leaves it out and routes say why.
func TestAttachedLeavesIBVerbsToTheAgent(t *testing.T) {
	ctx := testCtx(t)
	a := startNode(t, Config{Agent: filepath.Join(t.TempDir(), "no-agent.sock")})
	if got := a.Backends(); got != "shm+agent+tcp" {
		t.Fatalf("backends %q", got)
	}
	b := startNode(t, Config{Backend: backend.KindTCP})
	qp, err := a.Client().RequestQueuePair(ctx, a.ClientOf(b.Addr(), "").PID())
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Release()
	st, err := a.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Routes) != 1 || !strings.Contains(st.Routes[0].Why, "ibverbs: left to the host agent") {
		t.Fatalf("routes %v: want ibverbs left to the agent", st.Routes)
	}
}
