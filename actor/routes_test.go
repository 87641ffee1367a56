package actor

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

func TestRequestQueuePairConcurrent(t *testing.T) {
	sys, a, b := newPairNoLinger(t)
	ctx := testCtx(t)
	const n = 20
	qps := make([]*queuepair.QueuePair, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			qps[i], errs[i] = a.Client().RequestQueuePair(ctx, b.PID())
		}()
	}
	close(start)
	wg.Wait()
	ids := map[uint64]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if ids[qps[i].ID()] {
			t.Fatalf("queue pair id %d twice", qps[i].ID())
		}
		ids[qps[i].ID()] = true
		if qps[i].Route() != qps[0].Route() || qps[i].PeerID() != b.ID() {
			t.Fatalf("queue pair %d on another route or peer", i)
		}
	}
	rs := routes(t, ctx, a)
	if len(rs) != 1 || rs[0].Refs != n || rs[0].State != "up" || rs[0].PeerId != b.ID() || rs[0].PeerAddr != peerKey(b.PID()) {
		t.Fatalf("routes %v", rs)
	}
	// Every queue pair works.
	local := requestBuf(t, ctx, a.Client(), 1000, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), 1000*n, buffer.AccessReadWrite)
	for i, qp := range qps {
		rs, _ := remote.Slice(uint64(i)*1000, 1000)
		if err := qp.Put(local, rs).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}

	old := qps[0].Route()
	for i, qp := range qps {
		wg.Add(1)
		go func() { defer wg.Done(); qp.Release() }()
		if i == n/2 {
			qp.Release() // twice: idempotent
		}
	}
	wg.Wait()
	if rs := routes(t, ctx, a); len(rs) != 0 {
		t.Fatalf("routes after releasing all: %v", rs)
	}
	select {
	case <-old.Done():
	default:
		t.Fatal("route still up after its last queue pair was released")
	}
	if err := qps[3].Put(local, remote).Err(); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("released queue pair: %v", err)
	}

	qp := requestQP(t, ctx, a, b.PID())
	if qp.Route() == old || routeDead(qp.Route().(backend.Route)) {
		t.Fatal("new request did not build a new route")
	}
	if rs := routes(t, ctx, a); len(rs) != 1 || rs[0].Refs != 1 || rs[0].State != "up" {
		t.Fatalf("routes %v", rs)
	}
	rs0, _ := remote.Slice(0, 1000)
	if err := qp.Get(local, rs0).Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// A queue pair to the manager itself works (loopback route).
func TestQueuePairToSelf(t *testing.T) {
	_, a, _ := newPair(t)
	ctx := testCtx(t)
	x := requestBuf(t, ctx, a.Client(), 5000, buffer.AccessReadWrite)
	y := requestBuf(t, ctx, a.Client(), 5000, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, a.PID())
	crand.Read(mustBytes(t, a, x))
	if err := qp.Put(x, y).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustBytes(t, a, x), mustBytes(t, a, y)) {
		t.Fatal("bytes differ")
	}
}

func TestRequestQueuePairUnknownPeer(t *testing.T) {
	sys, a, b := newPair(t)
	// Actors that are not managers able to take a route: one answers the
	// handshake with the wrong type, one as a closing manager does.
	spawn := func(name string, reply proto.Message) *protoactor.PID {
		pid, err := sys.Root.SpawnNamed(protoactor.PropsFromFunc(func(c protoactor.Context) {
			if _, ok := c.Message().(*rdmapb.RouteHandshake); ok {
				c.Respond(reply)
			}
		}), name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sys.Root.StopFuture(pid).Wait() })
		return pid
	}
	liar := spawn("liar", &rdmapb.Pong{})
	closing := spawn("closing", &rdmapb.ErrorReply{Error: &rdmapb.Error{Code: rdmapb.Code_CLOSED, Message: "closing"}})

	for _, peer := range []*protoactor.PID{
		protoactor.NewPID(sys.Address(), "nobody"),
		protoactor.NewPID("192.0.2.1:4242", DefaultName), // no remote: unreachable address
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		qp, err := a.Client().RequestQueuePair(ctx, peer)
		cerr := ctx.Err()
		cancel()
		if !errors.Is(err, rdmamgr.ErrUnknownPeer) || errors.Is(err, context.DeadlineExceeded) || qp != nil {
			t.Fatalf("queue pair to %s: %v %v", peer, qp, err)
		}
		if cerr != nil {
			t.Fatalf("queue pair to %s: answered only after the ctx ended: %v", peer, err)
		}
		t.Logf("%s: %v", peer, err)
	}
	ctx := testCtx(t)
	if _, err := a.Client().RequestQueuePair(ctx, liar); !errors.Is(err, rdmamgr.ErrUnknownPeer) {
		t.Fatalf("queue pair to a non-manager: %v", err)
	}
	// The peer's CLOSED must not read as our manager being closed.
	if _, err := a.Client().RequestQueuePair(ctx, closing); !errors.Is(err, rdmamgr.ErrUnknownPeer) || errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("queue pair to a closing manager: %v", err)
	}
	// Failed setups leave no route behind, and a real peer still works.
	if rs := routes(t, ctx, a); len(rs) != 0 {
		t.Fatalf("routes %v", rs)
	}
	requestQP(t, ctx, a, b.PID())
}

func TestMaxRoutes(t *testing.T) {
	sys := newSystem(t)
	a := startManager(t, sys, Config{Name: "a", MaxRoutes: 1})
	b := startManager(t, sys, Config{Name: "b"})
	c := startManager(t, sys, Config{Name: "c"})
	ctx := testCtx(t)
	qpb, err := a.Client().RequestQueuePair(ctx, b.PID())
	if err != nil {
		t.Fatal(err)
	}
	requestQP(t, ctx, a, b.PID()) // same peer: same route
	if _, err := a.Client().RequestQueuePair(ctx, c.PID()); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("route over the limit: %v", err)
	}
	qpb.Release()
	if rs := routes(t, ctx, a); len(rs) != 1 || rs[0].Refs != 1 {
		t.Fatalf("routes %v", rs)
	}
}

// When the peer manager goes away, the old queue pair fails with PeerGone
// or Closed and a new request reaches the manager that replaced it.
func TestRouteFailureAndRebuild(t *testing.T) {
	sys := newSystem(t)
	a := startManager(t, sys, Config{Name: "a"})
	ctx := testCtx(t)
	b, err := New(sys, Config{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := startTCP(ctx, b); err != nil {
		t.Fatal(err)
	}
	const n = 16 << 20
	local := requestBuf(t, ctx, a.Client(), n, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, b.Client(), n, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, b.PID())
	if err := qp.Put(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	oldRoute := qp.Route()

	// Work in flight while the peer closes either completes or fails with
	// the route's error.
	inflight := qp.Get(local, remote)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := inflight.Wait(ctx); err != nil && !errors.Is(err, rdmamgr.ErrPeerGone) && !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("in-flight get: %v", err)
	}
	select {
	case <-oldRoute.Done():
	case <-ctx.Done():
		t.Fatal("route did not notice the peer closed")
	}
	if err := oldRoute.Err(); !errors.Is(err, rdmamgr.ErrPeerGone) && !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("route error %v", err)
	}
	for _, w := range []*queuepair.WorkRequest{qp.Put(local, remote), qp.Get(local, remote)} {
		if err := w.Wait(ctx); !errors.Is(err, rdmamgr.ErrPeerGone) && !errors.Is(err, rdmamgr.ErrClosed) {
			t.Fatalf("op on the old queue pair: %v", err)
		}
	}
	rs := routes(t, ctx, a)
	if len(rs) != 1 || !strings.HasPrefix(rs[0].State, "down") {
		t.Fatalf("routes %v", rs)
	}
	// While nobody answers under the name, requests fail cleanly.
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := a.Client().RequestQueuePair(short, b.PID()); !errors.Is(err, rdmamgr.ErrUnknownPeer) {
		t.Fatalf("queue pair to the closed peer: %v", err)
	}
	cancel()

	// A new manager under the same name.
	b2 := startManager(t, sys, Config{Name: "b"})
	if !b2.PID().Equal(b.PID()) || b2.ID() == b.ID() {
		t.Fatalf("new manager %s %x", b2.PID(), b2.ID())
	}
	qp2 := requestQP(t, ctx, a, b.PID())
	if qp2.PeerID() != b2.ID() || qp2.Route() == oldRoute || routeDead(qp2.Route().(backend.Route)) {
		t.Fatalf("new queue pair to %x on route %p (old %p)", qp2.PeerID(), qp2.Route(), oldRoute)
	}
	remote2 := requestBuf(t, ctx, b2.Client(), n, buffer.AccessReadWrite)
	crand.Read(mustBytes(t, a, local))
	if err := qp2.Put(local, remote2).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustBytes(t, a, local), mustBytes(t, b2, remote2)) {
		t.Fatal("bytes differ")
	}
	// The old manager's buffer is not the new peer's.
	if err := qp2.Put(local, remote).Err(); !errors.Is(err, rdmamgr.ErrWrongPeer) {
		t.Fatalf("old peer's buffer on the new route: %v", err)
	}
	// The old queue pair stays failed; releasing it leaves the new route.
	if err := qp.Put(local, remote).Wait(ctx); !errors.Is(err, rdmamgr.ErrPeerGone) && !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("old queue pair after rebuild: %v", err)
	}
	qp.Release()
	if rs := routes(t, ctx, a); len(rs) != 1 || rs[0].State != "up" || rs[0].PeerId != b2.ID() || rs[0].Refs != 1 {
		t.Fatalf("routes %v", rs)
	}
}
