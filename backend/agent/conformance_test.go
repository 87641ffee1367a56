//go:build linux

package agent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/agent"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	"github.com/rdmamgr/rdmamgr/node"
)

// The conformance suite through two real agents (rdmamgr nodes in agent
// mode, TCP between them) on loopback, naming different hosts: each of
// the suite's managers is a process attached to its own agent, so every
// operation goes process → agent A → TCP → agent B → process B's memory
// (and back for Get), events and messages included.
func TestConformanceThroughAgents(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sockets := map[uint64]string{}
	for owner, host := range map[uint64]string{backendtest.OwnerA: "host-a", backendtest.OwnerB: "host-b"} {
		sock := filepath.Join(dir, host+".sock")
		n, err := node.Start(ctx, node.Config{HostAgent: node.HostAgent{Socket: sock, HostID: host}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		sockets[owner] = sock
	}
	backendtest.Run(t, backendtest.Factory{
		NewBackend: func(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry) {
			return newProcess(t, owner, sockets[owner])
		},
		WrongKeyErr:              rdmamgr.ErrBadKey,
		ReleasedErr:              rdmamgr.ErrReleased,
		OutOfRangeErr:            rdmamgr.ErrOutOfRange,
		RevokedErr:               rdmamgr.ErrRevoked,
		RouteSurvivesRemoteError: true,
		// A region registered at an odd address is caller memory, in no
		// memfd: the agent cannot map it.
		MisalignedBaseErr: rdmamgr.ErrNotSupported,
		Verbs:             true,
		MaxSize:           4 << 20,
	})
}

// newProcess is a process's backends over a fresh registry: shm, and the
// agent backend attached to the agent at socket.
func newProcess(t testing.TB, owner uint64, socket string) (backend.Backend, *memreg.Registry) {
	t.Helper()
	reg := memreg.NewRegistry(owner, buffer.Limits{})
	reg.SetUnpooled() // as node does for a process with an agent
	sb, err := wiring.NewBackend[*shm.Backend](shm.Config{}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() }) // after the suite's Close of b (cleanups run last first)
	b, err := wiring.NewBackend[*agent.Backend](agent.Config{Socket: socket, ManagerID: owner,
		Addr: fmt.Sprintf("127.0.0.1:%d", 1000+owner%1000), SHM: sb}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b.Addr() == socket+" (not attached)" {
		t.Fatalf("not attached to the agent at %s", socket)
	}
	return b, reg
}
