package actor

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

func TestClose(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	local := requestBuf(t, ctx, a.Client(), 4096, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, b.Client(), 4096, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, b.PID())
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	pid := a.PID()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = a.Close() }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close again: %v", err)
	}

	// Every request fails, within the ctx.
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := a.Client().RequestBuffer(short, 10, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("request buffer after close: %v", err)
	}
	if _, err := a.Client().RequestQueuePair(short, b.PID()); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("request queue pair after close: %v", err)
	}
	if _, err := NewClient(sys, pid).Ping(short); !errors.Is(err, rdmamgr.ErrUnknownPeer) {
		t.Fatalf("ping after close: %v", err)
	}
	if err := NewClient(sys, pid).ReleaseBuffer(short, local); !errors.Is(err, rdmamgr.ErrUnknownPeer) {
		t.Fatalf("release buffer after close: %v", err)
	}
	if short.Err() != nil {
		t.Fatal("requests after close ran into the ctx")
	}
	// The queue pair's route was closed and the local memory released.
	if err := qp.Put(ctx, local, remote).Wait(ctx); !errors.Is(err, rdmamgr.ErrClosed) && !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("put after close: %v", err)
	}
	if st := a.reg.Stats(); st.Regions != 0 || st.Bytes != 0 {
		t.Fatalf("registry after close %+v", st)
	}
	if _, err := a.reg.Allocate(1, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("allocate after close: %v", err)
	}
	if err := startTCP(ctx, a); err == nil {
		t.Fatal("start after close")
	}
	// The peer is unaffected.
	if _, err := b.Bytes(remote); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client().Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// Close before Start, twice.
func TestCloseNeverStarted(t *testing.T) {
	m, err := New(newSystem(t), Config{Name: "never-started"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// A closed manager's actor answers every request with CLOSED, so requests
// still queued when Close stops it do not wait for a timeout. The actor is
// stopped by Close; a second actor on the closed manager stands for it.
func TestClosedManagerAnswersClosed(t *testing.T) {
	sys, a, _ := newPair(t)
	ctx := testCtx(t)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	pid := sys.Root.Spawn(protoactor.PropsFromProducer(func() protoactor.Actor { return &managerActor{m: a} }))
	t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
	c := NewClient(sys, pid)
	if _, err := c.Ping(ctx); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("ping: %v", err)
	}
	if _, err := c.RequestBuffer(ctx, 10, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("request buffer: %v", err)
	}
	if _, err := c.Status(ctx); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("status: %v", err)
	}
	res := ask(t, sys, pid, &rdmapb.RouteHandshake{Version: ProtocolVersion, InitiatorId: 1, Backend: "tcp"})
	if er, ok := res.(*rdmapb.ErrorReply); !ok || er.Error.GetCode() != rdmapb.Code_CLOSED {
		t.Fatalf("handshake: %v", res)
	}
}

// Close while queue pairs are being requested: every request returns (with
// a queue pair or an error) and Close does not hang.
func TestCloseDuringRequests(t *testing.T) {
	sys := newSystem(t)
	b := startManager(t, sys, Config{Name: "b"})
	a, err := New(sys, Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := startTCP(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			qp, err := a.Client().RequestQueuePair(ctx, b.PID())
			if err == nil {
				qp.Release()
			} else if ctx.Err() != nil {
				t.Errorf("request ran into the ctx: %v", err)
			}
		}()
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// After every manager is closed and the system shut down, no goroutine the
// test started is left (goleak retries while goroutines wind down).
func TestNoGoroutineLeak(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), protoactorTimers)
	sys := NewActorSystem(nil)
	a, err := New(sys, Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(sys, Config{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, m := range []*Manager{a, b} {
		if err := startTCP(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	local := requestBuf(t, ctx, a.Client(), 1<<20, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), 1<<20, buffer.AccessReadWrite)
	qp, err := a.Client().RequestQueuePair(ctx, b.PID())
	if err != nil {
		t.Fatal(err)
	}
	qp2, err := b.Client().RequestQueuePair(ctx, a.PID())
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := qp2.Put(ctx, remote, local).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	_ = qp.Get(ctx, local, remote) // possibly in flight at Close
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	if _, err := a.Client().RequestQueuePair(short, protoactor.NewPID(sys.Address(), "nobody")); !errors.Is(err, rdmamgr.ErrUnknownPeer) {
		t.Fatal(err)
	}
	cancelShort()
	qp2.Release()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	sys.Shutdown()
}
