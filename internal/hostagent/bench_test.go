//go:build linux

package hostagent

import (
	"context"
	"testing"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// BenchmarkGet8 is one 8-byte Get at a time from a process to a process
// of another "host": direct (TCP between the processes) and through their
// agents (process, attach socket, agent, TCP, agent, the target's pages),
// in one run so the two compare (ns/op: the latency; the difference is
// what the agents add).
//
//	go test -run - -bench Get8 -count 3 ./internal/hostagent
func BenchmarkGet8(b *testing.B) {
	for _, mode := range []string{"direct", "agents"} {
		b.Run(mode, func(b *testing.B) {
			benchGet8(b, mode == "agents")
		})
	}
}

func benchGet8(b *testing.B, viaAgents bool) {
	secret := testSecret(b)
	sys := newSystem(b)
	var p1, p2 *actor.Manager
	if viaAgents {
		a := startAgent(b, sys, "agentA", 1, secret)
		ag := startAgent(b, sys, "agentB", 2, secret)
		p1 = startProcess(b, sys, "p1", secret, a.cfg.Socket)
		p2 = startProcess(b, sys, "p2", secret, ag.cfg.Socket)
		waitFor(b, "attached", func() bool { return attachedTo(p1, a.Addr()) && attachedTo(p2, ag.Addr()) })
	} else {
		p1, _ = startManager(b, sys, "p1", secret)
		p2, _ = startManager(b, sys, "p2", secret)
	}
	ctx := context.Background()
	qp, err := p1.Client().RequestQueuePair(ctx, p2.PID())
	if err != nil {
		b.Fatal(err)
	}
	defer qp.Release()
	if viaAgents != (qp.Kind() == backend.KindAgent) {
		b.Fatalf("queue pair on %s", qp.Kind())
	}
	local, err := p1.Client().RequestBuffer(ctx, 8, buffer.AccessReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	remote, err := p2.Client().RequestBuffer(ctx, 8, buffer.AccessReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if err := qp.Get(ctx, local, remote).Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
