//go:build linux

package hostagent

import (
	"context"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// testTimeout bounds every wait of a test; nothing here asserts durations.
const testTimeout = 20 * time.Second

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func testSecret(t testing.TB) backend.Secret {
	t.Helper()
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	s, err := backend.NewSecret(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newSystem returns a local actor system, shut down at the end of the
// test (after the managers and agents on it: cleanups run last first).
func newSystem(t testing.TB) *protoactor.ActorSystem {
	t.Helper()
	sys := actor.NewActorSystem(nil)
	t.Cleanup(sys.Shutdown)
	return sys
}

// startManager starts a manager named name on sys over a TCP backend of
// conns connections per route, and returns it and the backend.
func startManager(t testing.TB, sys *protoactor.ActorSystem, name string, secret backend.Secret) (*actor.Manager, *tcp.Backend) {
	t.Helper()
	return startManagerWith(t, sys, name, secret, mgrOpts{conns: DefaultRoutes})
}

// mgrOpts change a test manager: its TCP routes' connections, its
// MaxRoutes (0: the default).
type mgrOpts struct{ conns, maxRoutes int }

// startManagerWith is startManager as o says.
func startManagerWith(t testing.TB, sys *protoactor.ActorSystem, name string, secret backend.Secret, o mgrOpts) (*actor.Manager, *tcp.Backend) {
	t.Helper()
	m, err := actor.New(sys, actor.Config{Name: name, Secret: secret, MaxRoutes: o.maxRoutes})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := wiring.NewBackend[*tcp.Backend](tcp.Config{Secret: secret, ConnsPerRoute: o.conns}, wiring.ManagerRegistry(m), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background(), actor.Choice{Backend: tb}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close manager %s: %v", name, err)
		}
	})
	return m, tb
}

// startAgent starts an agent beside a new manager named name on sys,
// with host id host, listening in a fresh directory; mod changes its
// config before New.
func startAgent(t testing.TB, sys *protoactor.ActorSystem, name string, host byte, secret backend.Secret, mod ...func(*Config)) *Agent {
	t.Helper()
	return startAgentWith(t, sys, name, host, secret, mgrOpts{conns: DefaultRoutes}, mod...)
}

// startAgentWith is startAgent whose manager is as o says.
func startAgentWith(t testing.TB, sys *protoactor.ActorSystem, name string, host byte, secret backend.Secret, o mgrOpts, mod ...func(*Config)) *Agent {
	t.Helper()
	m, tb := startManagerWith(t, sys, name, secret, o)
	cfg := Config{Socket: filepath.Join(t.TempDir(), "agent.sock"), Secret: secret}
	cfg.HostID[0] = host
	for _, f := range mod {
		f(&cfg)
	}
	a, err := New(cfg, m, tb)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("close agent %s: %v", name, err)
		}
	})
	return a
}

// fakeProc is a process attached to an agent the way package
// backend/agent attaches (by hand here): its own registry and shm
// backend, which the agent maps.
type fakeProc struct {
	id      uint64
	reg     *memreg.Registry
	sb      *shm.Backend
	c       *net.UnixConn
	welcome agentwire.Welcome
}

// newFakeProc makes a process's registry and started shm backend.
func newFakeProc(t *testing.T, secret backend.Secret) *fakeProc {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | 1<<40
	reg := memreg.NewRegistry(id, buffer.Limits{})
	sb, err := wiring.NewBackend[*shm.Backend](shm.Config{Secret: secret}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		reg.Close(ctx)
	})
	return &fakeProc{id: id, reg: reg, sb: sb}
}

// attachOpts change what a fake process claims.
type attachOpts struct {
	pid    uint32         // 0: ours
	secret backend.Secret // the secret its MAC proves
}

// attach runs the attach handshake with the agent at path. It returns
// the agent's refusal (its gone's error, or the socket closing) as err.
func (f *fakeProc) attach(ctx context.Context, path string, o attachOpts) error {
	c, err := agentwire.Dial(ctx, path)
	if err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(testTimeout))
	fail := func(err error) error { c.Close(); return err }
	buf := make([]byte, agentwire.MaxPacket)
	pkt, err := agentwire.ReadPacket(c, buf)
	if err != nil {
		return fail(err)
	}
	h, err := agentwire.DecodeHello(pkt)
	if err != nil {
		return fail(err)
	}
	pid := o.pid
	if pid == 0 {
		pid = uint32(os.Getpid())
	}
	addr := "nonhost/fake"
	auth := agentwire.Auth{MAC: agentwire.AuthMAC(o.secret, h.Nonce, pid, f.id, addr), PID: pid, ManagerID: f.id, Addr: addr}
	if pkt, err = auth.Encode(); err != nil {
		return fail(err)
	}
	if err := agentwire.WritePacket(c, pkt); err != nil {
		return fail(err)
	}
	if pkt, err = agentwire.ReadPacket(c, buf); err != nil {
		return fail(err)
	}
	if t, _ := agentwire.Type(pkt); t == agentwire.TypeGone {
		g, err := agentwire.DecodeGone(pkt)
		if err != nil {
			return fail(err)
		}
		return fail(g.Err())
	}
	info, err := agentwire.DecodeInfo(agentwire.TypeShmPrepare, pkt)
	if err != nil {
		return fail(err)
	}
	answer, err := wiring.SHMAcceptAgentRoute(f.sb, ctx, h.AgentID, info)
	if err != nil {
		return fail(err)
	}
	if pkt, err = agentwire.EncodeInfo(agentwire.TypeShmAccept, answer); err != nil {
		return fail(err)
	}
	if err := agentwire.WritePacket(c, pkt); err != nil {
		return fail(err)
	}
	if pkt, err = agentwire.ReadPacket(c, buf); err != nil {
		return fail(err)
	}
	if t, _ := agentwire.Type(pkt); t == agentwire.TypeGone { // refused after the shm handshake
		g, err := agentwire.DecodeGone(pkt)
		if err != nil {
			return fail(err)
		}
		return fail(g.Err())
	}
	if f.welcome, err = agentwire.DecodeWelcome(pkt); err != nil {
		return fail(err)
	}
	c.SetDeadline(time.Time{})
	f.c = c
	return nil
}

// waitFor polls cond until it holds or the test times out.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// post sends posts in one batch.
func (f *fakeProc) post(t *testing.T, posts ...agentwire.Post) {
	t.Helper()
	var b agentwire.Batch
	b.Start(agentwire.TypePost)
	for i := range posts {
		if err := b.AddPost(&posts[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := agentwire.WritePacket(f.c, b.Packet()); err != nil {
		t.Fatal(err)
	}
}

// dones reads dones until n came, by wrid.
func (f *fakeProc) dones(t *testing.T, n int) map[uint64]agentwire.Done {
	t.Helper()
	out := make(map[uint64]agentwire.Done)
	buf := make([]byte, agentwire.MaxPacket)
	var ds []agentwire.Done
	for len(out) < n {
		pkt, err := agentwire.ReadPacket(f.c, buf)
		if err != nil {
			t.Fatalf("after %d dones of %d: %v", len(out), n, err)
		}
		if ds, err = agentwire.DecodeDones(pkt, ds); err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if _, dup := out[d.WRID]; dup {
				t.Fatalf("done %d twice", d.WRID)
			}
			out[d.WRID] = d
		}
	}
	return out
}

// alloc allocates a region of n random bytes in the process.
func (f *fakeProc) alloc(t *testing.T, n uint64, a buffer.Access) (buffer.Buffer, []byte) {
	t.Helper()
	h, err := f.reg.Allocate(n, a)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := f.reg.Bytes(h)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = rand.Read(mem)
	return h, mem
}

// localOf names h as a post's local memory.
func localOf(h buffer.Buffer) agentwire.Local {
	return agentwire.Local{Region: h.Region, Key: h.Key, Offset: h.Offset, Length: h.Length}
}

// pairOfAgents starts agents A and B (host ids 1 and 2) and attaches p1
// to A and p2 to B.
func pairOfAgents(t *testing.T) (a, b *Agent, p1, p2 *fakeProc) {
	t.Helper()
	return pairOfAgentsOn(t, newSystem(t), testSecret(t))
}

// pairOfAgentsOn is pairOfAgents on sys, with secret.
func pairOfAgentsOn(t *testing.T, sys *protoactor.ActorSystem, secret backend.Secret) (a, b *Agent, p1, p2 *fakeProc) {
	t.Helper()
	a = startAgent(t, sys, "agentA", 1, secret)
	b = startAgent(t, sys, "agentB", 2, secret)
	ctx := testCtx(t)
	p1, p2 = newFakeProc(t, secret), newFakeProc(t, secret)
	if err := p1.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	if err := p2.attach(ctx, b.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p1.c.Close(); p2.c.Close() })
	return a, b, p1, p2
}
