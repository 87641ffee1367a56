//go:build linux

package hostagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// farCount is the number of far routes the agent holds.
func (a *Agent) farCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.far)
}

// A process names a far "agent" that is a plain manager (no host agent):
// the route handshake says so, the agent drops the route and refuses the
// post with ErrNotAgent (UNAUTHENTICATED), never posting on it; past
// maxFarFails such failures the process's posts that need a new far route
// are refused at once (ErrDialBudget, LIMIT), while another process of the
// agent still reaches a real far agent.
func TestFarMustBeAnAgent(t *testing.T) {
	sys, secret := newSystem(t), testSecret(t)
	a, b, p1, p2 := pairOfAgentsOn(t, sys, secret)
	defer maxFarFails.Store(maxFarFails.Load())
	maxFarFails.Store(2)
	plain, _ := startManager(t, sys, "plain", secret)
	pid := plain.PID()
	plainAddr := pid.Address + "/" + pid.Id
	src, _ := p1.alloc(t, 4096, buffer.AccessReadWrite)
	dst, _ := p2.alloc(t, 4096, buffer.AccessReadWrite)
	// A handle of a region of the plain manager's (it must not matter).
	own, err := wiring.ManagerRegistry(plain).Allocate(4096, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	put := func(wrid uint64, far string, farID uint64, remote buffer.Buffer) rdmapb.Code {
		p1.post(t, agentwire.Post{WRID: wrid, Op: backend.OpWrite, Via: 1, FarAgent: far, FarAgentID: farID, Local: localOf(src), Remote: remote})
		return rdmapb.Code(p1.dones(t, 1)[wrid].Code)
	}
	for wrid := uint64(1); wrid <= 2; wrid++ {
		if c := put(wrid, plainAddr, plain.ID(), own); !errors.Is(backend.Sentinel(c), rdmamgr.ErrUnauthenticated) {
			t.Fatalf("put %d through a manager that is no agent: %v, want UNAUTHENTICATED", wrid, c)
		}
		if n := a.farCount(); n != 0 {
			t.Fatalf("%d far routes kept after a refused one", n)
		}
	}
	if n := a.farSetups.Load(); n != 1 {
		t.Fatalf("%d far-route setups to an address found no agent, want 1 (not dialled again for a while)", n)
	}
	if c := put(3, plainAddr, plain.ID(), own); !errors.Is(backend.Sentinel(c), rdmamgr.ErrLimit) {
		t.Fatalf("put after %d failed far routes: %v, want LIMIT", maxFarFails.Load(), c)
	}
	if c := put(4, b.Addr(), p2.welcome.AgentID, dst); !errors.Is(backend.Sentinel(c), rdmamgr.ErrLimit) {
		t.Fatalf("put to a real agent while the budget is spent: %v, want LIMIT (no new far route)", c)
	}

	// Another process of agent A is not held to p1's budget.
	p3 := newFakeProc(t, b.cfg.Secret)
	if err := p3.attach(testCtx(t), a.cfg.Socket, attachOpts{secret: b.cfg.Secret}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p3.c.Close() })
	src3, _ := p3.alloc(t, 4096, buffer.AccessReadWrite)
	p3.post(t, agentwire.Post{WRID: 1, Op: backend.OpWrite, Via: p2.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p2.welcome.AgentID, Local: localOf(src3), Remote: dst})
	if d := p3.dones(t, 1)[1]; d.Code != 0 {
		t.Fatalf("another process's put to a real agent: %v", rdmapb.Code(d.Code))
	}
	// Once the route is up, p1 uses it too: only new setups are refused.
	if c := put(5, b.Addr(), p2.welcome.AgentID, dst); c != 0 {
		t.Fatalf("put on a far route that is up: %v", c)
	}
}

// With a membership check (SetFarCheck), a far address it refuses is
// never dialled: the post is refused with ErrNotAgent (UNAUTHENTICATED)
// and the agent holds no route; one it accepts works.
func TestFarCheck(t *testing.T) {
	a, b, p1, p2 := pairOfAgents(t)
	src, _ := p1.alloc(t, 4096, buffer.AccessReadWrite)
	dst, _ := p2.alloc(t, 4096, buffer.AccessReadWrite)
	var mu sync.Mutex
	var asked []string
	member := ""
	a.SetFarCheck(func(ctx context.Context, addr string) error {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, addr)
		if addr != member {
			return fmt.Errorf("%s: %w", addr, rdmamgr.ErrUnknownPeer)
		}
		return nil
	})
	post := agentwire.Post{WRID: 1, Op: backend.OpWrite, Via: p2.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: dst}
	p1.post(t, post)
	if d := p1.dones(t, 1)[1]; !errors.Is(backend.Sentinel(rdmapb.Code(d.Code)), rdmamgr.ErrUnauthenticated) {
		t.Fatalf("put to an address that is no member: %v, want UNAUTHENTICATED", rdmapb.Code(d.Code))
	}
	if a.farCount() != 0 {
		t.Fatalf("a route to a refused address: %d far routes at A", a.farCount())
	}
	mu.Lock()
	member = b.Addr()
	mu.Unlock()
	post.WRID = 2
	p1.post(t, post)
	if d := p1.dones(t, 1)[2]; d.Code != 0 {
		t.Fatalf("put to a member: %v", rdmapb.Code(d.Code))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || asked[0] != b.Addr() {
		t.Fatalf("checked %q, want %s twice", asked, b.Addr())
	}
}
