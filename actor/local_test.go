package actor

import (
	"errors"
	"testing"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/control"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// askAsRemote delivers msg to pid as the guard delivers a message from the
// network (stamped remote, from peer) and returns the reply.
func askAsRemote(t *testing.T, sys *protoactor.ActorSystem, pid *protoactor.PID, peer string, msg any) any {
	t.Helper()
	f := protoactor.NewFuture(sys, testTimeout)
	env := &protoactor.MessageEnvelope{Message: msg, Sender: f.PID()}
	control.StampEnvelope(env, peer)
	sys.Root.Send(pid, env)
	res, err := f.Result()
	if err != nil {
		t.Fatalf("request %T: %v", msg, err)
	}
	return res
}

// Queue pairs belong to callers in the manager's process: a remote peer
// may neither get one nor release ours by id (ids are small counters; a
// peer that released them would tear our routes down).
func TestQueuePairsOnlyLocal(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	local := requestBuf(t, ctx, a.Client(), 4096, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, b.Client(), 4096, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, b.PID())
	res := askAsRemote(t, sys, a.PID(), "127.0.0.1:9", &rdmapb.ReleaseQueuePair{QpId: qp.ID()})
	if r, ok := res.(*rdmapb.ReleaseQueuePairResponse); !ok || !errors.Is(toError(r.Error), rdmamgr.ErrNotLocal) {
		t.Fatalf("remote release_queue_pair: %v", res)
	}
	res = askAsRemote(t, sys, a.PID(), "127.0.0.1:9", &rdmapb.RequestQueuePair{Peer: &rdmapb.ManagerRef{Address: b.PID().Address, Id: b.PID().Id}})
	if r, ok := res.(*rdmapb.RequestQueuePairResponse); !ok || !errors.Is(toError(r.Error), rdmamgr.ErrNotLocal) {
		t.Fatalf("remote request_queue_pair: %v", res)
	}
	if err := qp.Put(local, remote).Wait(ctx); err != nil {
		t.Fatalf("put after the refused release: %v", err)
	}
	st, err := a.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.QueuePairs != 1 || st.Refusals[RefusedNotLocal] != 2 {
		t.Fatalf("queue pairs %d, not_local refusals %d; want 1 and 2", st.QueuePairs, st.Refusals[RefusedNotLocal])
	}
}

// PID hands out copies: protoactor caches the resolved process inside a
// PID, so a PID another actor system used must not be the manager's own
// (Close would send its PoisonPill through that system, over the network,
// where the guard drops it).
func TestPIDIsACopy(t *testing.T) {
	_, a, _ := newPair(t)
	p, q := a.PID(), a.PID()
	if p == q || p.Address != q.Address || p.Id != q.Id {
		t.Fatalf("PID() = %p %v, then %p %v: want equal copies", p, p, q, q)
	}
	if p == a.pid {
		t.Fatal("PID() is the manager's own")
	}
}

// Start needs a backend, and runs once.
func TestStartChecks(t *testing.T) {
	sys := newSystem(t)
	m, err := New(sys, Config{Name: "x"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Start(testCtx(t)); err == nil {
		t.Fatal("start without a backend")
	}
	if err := startTCP(testCtx(t), m); err != nil {
		t.Fatal(err)
	}
	if err := startTCP(testCtx(t), m); err == nil {
		t.Fatal("start twice")
	}
	if _, err := m.Client().Ping(testCtx(t)); err != nil {
		t.Fatalf("ping after a refused second start: %v", err)
	}
}
