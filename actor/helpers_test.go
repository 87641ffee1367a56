package actor

import (
	"context"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// testTimeout bounds every wait of a test; nothing here asserts durations.
const testTimeout = 20 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// newSystem returns a local actor system (no protoactor remote), shut down
// after every manager of the test is closed.
func newSystem(t *testing.T) *protoactor.ActorSystem {
	t.Helper()
	sys := NewActorSystem(nil)
	t.Cleanup(sys.Shutdown)
	return sys
}

// startManager starts a manager on sys over the TCP backend and closes it at
// the end of the test.
func startManager(t *testing.T, sys *protoactor.ActorSystem, cfg Config) *Manager {
	t.Helper()
	return startManagerTCP(t, sys, cfg, tcp.Config{})
}

// startManagerTCP is startManager with a TCP backend configured by tc.
func startManagerTCP(t *testing.T, sys *protoactor.ActorSystem, cfg Config, tc tcp.Config) *Manager {
	t.Helper()
	m, err := New(sys, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := startTCP(context.Background(), m, tc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close manager %s: %v", cfg.Name, err)
		}
	})
	return m
}

func newPair(t *testing.T) (*protoactor.ActorSystem, *Manager, *Manager) {
	t.Helper()
	sys := newSystem(t)
	return sys, startManager(t, sys, Config{Name: "a"}), startManager(t, sys, Config{Name: "b"})
}

// newPairNoLinger is newPair whose a closes a route with its last queue
// pair (RouteLinger < 0).
func newPairNoLinger(t *testing.T) (*protoactor.ActorSystem, *Manager, *Manager) {
	t.Helper()
	sys := newSystem(t)
	return sys, startManager(t, sys, Config{Name: "a", RouteLinger: -1}), startManager(t, sys, Config{Name: "b"})
}

// ask sends a raw message to pid and returns the reply.
func ask(t *testing.T, sys *protoactor.ActorSystem, pid *protoactor.PID, msg any) any {
	t.Helper()
	res, err := sys.Root.RequestFuture(pid, msg, testTimeout).Result()
	if err != nil {
		t.Fatalf("request %T: %v", msg, err)
	}
	return res
}

func mustBytes(t *testing.T, m *Manager, b buffer.Buffer) []byte {
	t.Helper()
	p, err := m.Bytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func requestQP(t *testing.T, ctx context.Context, m *Manager, peer *protoactor.PID) *queuepair.QueuePair {
	t.Helper()
	qp, err := m.Client().RequestQueuePair(ctx, peer)
	if err != nil {
		t.Fatalf("request queue pair to %s: %v", peer, err)
	}
	t.Cleanup(qp.Release)
	return qp
}

func requestBuf(t *testing.T, ctx context.Context, c *Client, n uint64, a buffer.Access) buffer.Buffer {
	t.Helper()
	b, err := c.RequestBuffer(ctx, n, a)
	if err != nil {
		t.Fatalf("request %d-byte buffer: %v", n, err)
	}
	return b
}

func routes(t *testing.T, ctx context.Context, m *Manager) []*rdmapb.RouteStatus {
	t.Helper()
	st, err := m.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.Routes
}

// startTCP starts m over a TCP backend (tc, default config without one)
// that proves m's secret: the assembly package node does for real.
func startTCP(ctx context.Context, m *Manager, tc ...tcp.Config) error {
	var c tcp.Config
	if len(tc) > 0 {
		c = tc[0]
	}
	c.Secret = m.cfg.Secret
	b, err := wiring.NewBackend[*tcp.Backend](c, m.reg, m.Logger())
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		b.Close()
		return err
	}
	return m.Start(ctx, Choice{Backend: b})
}

// protoactorTimers are goroutines protoactor leaves behind for a while
// after an actor system shuts down: the dead-letter throttle's timer ends
// by itself after its period (a second). Not ours to wait for.
var protoactorTimers = goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1")
