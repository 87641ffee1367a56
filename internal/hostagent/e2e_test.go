//go:build linux

package hostagent

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/agent"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// startProcess starts a process's manager named name on sys attached to
// the agent at sock: backends agent, shm, tcp, in that order (node puts
// shm first; on one real host that would keep every route on shm, and
// here the routes are to go through the agents, which name different
// hosts).
func startProcess(t testing.TB, sys *protoactor.ActorSystem, name string, secret backend.Secret, sock string) *actor.Manager {
	t.Helper()
	m, err := actor.New(sys, actor.Config{Name: name, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	reg := wiring.ManagerRegistry(m)
	ctx := context.Background()
	tb, err := wiring.NewBackend[*tcp.Backend](tcp.Config{Secret: secret}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := wiring.NewBackend[*shm.Backend](shm.Config{Secret: secret, Fallback: tb}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ab, err := wiring.NewBackend[*agent.Backend](agent.Config{Socket: sock, Secret: secret, ManagerID: m.ID(), Addr: "nonhost/" + name, SHM: sb}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ab.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, actor.Choice{Backend: ab}, actor.Choice{Backend: sb}, actor.Choice{Backend: tb}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	agentBackends.Store(m, ab)
	return m
}

// agentBackends are the processes' agent backends, by manager.
var agentBackends sync.Map

// attachedTo reports whether process m's agent backend is attached to
// the agent at addr.
func attachedTo(m *actor.Manager, addr string) bool {
	ab, _ := agentBackends.Load(m)
	return strings.HasSuffix(ab.(*agent.Backend).Addr(), "agent "+addr+")")
}

// Processes attached to two agents (hosts 1 and 2) through queue pairs:
// the route is the agent backend's; Put, Get, PutWithImm (the event names
// the initiating process) and the atomics move every byte through both
// agents; one TCP route joins the agents whatever the processes.
func TestEndToEnd(t *testing.T) {
	secret := testSecret(t)
	sys := newSystem(t)
	a := startAgent(t, sys, "agentA", 1, secret)
	b := startAgent(t, sys, "agentB", 2, secret)
	p1 := startProcess(t, sys, "p1", secret, a.cfg.Socket)
	p3 := startProcess(t, sys, "p3", secret, a.cfg.Socket)
	p2 := startProcess(t, sys, "p2", secret, b.cfg.Socket)
	ctx := testCtx(t)
	waitFor(t, "three processes attached", func() bool {
		return attachedTo(p1, a.Addr()) && attachedTo(p3, a.Addr()) && attachedTo(p2, b.Addr())
	})

	evs, err := p2.SubscribeEvents(16)
	if err != nil {
		t.Fatal(err)
	}
	defer evs.Close()
	const n = 1 << 20
	remote, err := p2.Client().RequestBuffer(ctx, n, buffer.AccessReadWrite|buffer.AccessNotify|buffer.AccessAtomic)
	if err != nil {
		t.Fatal(err)
	}
	theirs, _ := p2.Bytes(remote)
	for _, p := range []*actor.Manager{p1, p3} {
		qp, err := p.Client().RequestQueuePair(ctx, p2.PID())
		if err != nil {
			t.Fatal(err)
		}
		defer qp.Release()
		if k := qp.Kind(); k != backend.KindAgent {
			t.Fatalf("queue pair on %s, want agent", k)
		}
		local, err := p.Client().RequestBuffer(ctx, n, buffer.AccessReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		mine, _ := p.Bytes(local)
		_, _ = rand.Read(mine)
		if err := qp.PutWithImm(ctx, local, remote, 77).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mine, theirs) {
			t.Fatal("put: bytes differ")
		}
		ev := <-evs.C
		if ev.Peer != p.ID() || ev.Imm != 77 || ev.Region != remote.Region || ev.Length != n {
			t.Fatalf("event %+v, want from %x", ev, p.ID())
		}
		_, _ = rand.Read(theirs)
		if err := qp.Get(ctx, local, remote).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mine, theirs) {
			t.Fatal("get: bytes differ")
		}
		word, _ := remote.Slice(0, 8)
		clear(theirs[:8])
		w := qp.FetchAdd(ctx, word, 5)
		if err := w.Wait(ctx); err != nil || w.Value() != 0 {
			t.Fatalf("fetch-add: %v, old %d", err, w.Value())
		}
	}
	a.mu.Lock()
	far := len(a.far)
	a.mu.Unlock()
	if far != 1 {
		t.Fatalf("agent A holds %d routes to far agents, want 1 for both processes", far)
	}
	// Each process's route says which backend the agents' route runs on
	// (its agent answered its ask at setup): TCP here.
	for _, p := range []*actor.Manager{p1, p3} {
		st, err := p.Client().Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := regexp.MustCompile(`; via host agent \(slot [1-9][0-9]* at agent ` + regexp.QuoteMeta(b.Addr()) + `\) over tcp$`)
		if len(st.Routes) != 1 || !want.MatchString(st.Routes[0].Why) {
			t.Fatalf("routes %v: want one whose why ends in %q", st.Routes, want)
		}
	}
}

// A process that goes (its manager closes: its attach socket and shm
// route end) fails the operations aimed at it with ErrPeerGone (or its
// buffers as released); the agent closing fails the processes'
// cross-host operations with a clear error, and a new agent on the same
// socket takes them back without restarting them.
func TestEndToEndFailures(t *testing.T) {
	secret := testSecret(t)
	sys := newSystem(t)
	a := startAgent(t, sys, "agentA", 1, secret)
	b := startAgent(t, sys, "agentB", 2, secret)
	p1 := startProcess(t, sys, "p1", secret, a.cfg.Socket)
	p2 := startProcess(t, sys, "p2", secret, b.cfg.Socket)
	p3 := startProcess(t, sys, "p3", secret, b.cfg.Socket)
	ctx := testCtx(t)
	waitFor(t, "processes attached", func() bool {
		return attachedTo(p1, a.Addr()) && attachedTo(p2, b.Addr()) && attachedTo(p3, b.Addr())
	})
	local, err := p1.Client().RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	put := func(to *actor.Manager) error {
		t.Helper()
		remote, err := to.Client().RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := p1.Client().RequestQueuePair(ctx, to.PID())
		if err != nil {
			return err
		}
		defer qp.Release()
		if k := qp.Kind(); k != backend.KindAgent {
			t.Fatalf("queue pair on %s, want agent", k)
		}
		return qp.Put(ctx, local, remote).Wait(ctx)
	}
	if err := put(p2); err != nil {
		t.Fatal(err)
	}

	// P2 goes: operations on its buffers fail; P3 beside it is untouched.
	remote, _ := p2.Client().RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
	qp, err := p1.Client().RequestQueuePair(ctx, p2.PID())
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Release()
	p2.Close()
	waitFor(t, "B to drop P2", func() bool { return b.Procs() == 1 })
	err = qp.Put(ctx, local, remote).Wait(ctx)
	if !errors.Is(err, rdmamgr.ErrPeerGone) && !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("put to a gone process: %v, want peer gone or released", err)
	}
	t.Logf("put to a gone process: %v", err)
	if err := put(p3); err != nil {
		t.Fatalf("put to P3 after P2 went: %v", err)
	}

	// Agent A goes: P1's cross-host operations fail, clearly.
	remote3, _ := p3.Client().RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
	qp3, err := p1.Client().RequestQueuePair(ctx, p3.PID())
	if err != nil {
		t.Fatal(err)
	}
	defer qp3.Release()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	err = qp3.Put(ctx, local, remote3).Wait(ctx)
	if !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("put after the agent went: %v, want peer gone", err)
	}
	t.Logf("put after the agent went: %v", err)

	// A new agent on the same socket: P1 re-attaches by itself.
	a2 := startAgent(t, sys, "agentA2", 1, secret, func(c *Config) { c.Socket = a.cfg.Socket })
	waitFor(t, "P1 to re-attach", func() bool { return attachedTo(p1, a2.Addr()) })
	if err := put(p3); err != nil {
		t.Fatalf("put after re-attaching: %v", err)
	}
}
