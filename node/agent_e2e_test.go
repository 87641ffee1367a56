//go:build linux

package node

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// Two real agents on loopback naming different hosts, a process attached
// to each and a third beside the first. Processes on one host stay on shm
// (first choice), whatever their agents say: here all are on one real
// host. (backend/agent's TestConformanceThroughAgents runs routes through
// the agents; test/netns's hosts put them on different hosts for real.)
func TestAgentsSameHostStaysSHM(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	sa, sb := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	startNode(t, Config{HostAgent: HostAgent{Socket: sa, HostID: "host-a"}})
	startNode(t, Config{HostAgent: HostAgent{Socket: sb, HostID: "host-b"}})
	p1 := startNode(t, Config{Agent: sa})
	p2 := startNode(t, Config{Agent: sb})
	p3 := startNode(t, Config{Agent: sa})

	for _, p := range []*Node{p2, p3} {
		qp, err := p1.Client().RequestQueuePair(ctx, p1.ClientOf(p.Addr(), "").PID())
		if err != nil {
			t.Fatal(err)
		}
		defer qp.Release()
		if k := qp.Kind(); k != backend.KindSHM {
			t.Fatalf("same-host queue pair on %s, want shm", k)
		}
		moveBoth(t, p1, p, qp)
	}
	st, err := p1.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Routes {
		if r.Why != "first choice" {
			t.Fatalf("route %v: want first choice", r)
		}
	}
}

// moveBoth Puts 1 MiB from a to b over qp and Gets it back, every byte
// checked.
func moveBoth(t *testing.T, a, b *Node, qp *queuepair.QueuePair) {
	t.Helper()
	ctx := testCtx(t)
	local, err := a.Client().RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := a.ClientOf(b.Addr(), "").RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	mine, _ := a.Manager().Bytes(local)
	theirs, _ := b.Manager().Bytes(remote)
	copy(mine, bytes.Repeat([]byte("via agents"), len(mine)/10))
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if !bytes.Equal(mine, theirs) {
		t.Fatal("Put: the peer's buffer differs")
	}
	copy(theirs, bytes.Repeat([]byte("and back.."), len(theirs)/10))
	if err := qp.Get(ctx, local, remote).Wait(ctx); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !bytes.Equal(mine, theirs) {
		t.Fatal("Get: our buffer differs")
	}
}
