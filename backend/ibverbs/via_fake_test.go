//go:build ibverbs

package ibverbs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// ownerP is the manager id of the fake attached process.
const ownerP = 0x9000

// testGate is a proxy's gate (memreg.Gate) that counts its users, as the
// process's state-table slot does; cut makes it refuse newcomers.
type testGate struct {
	users atomic.Int64
	cut   atomic.Bool
}

func (g *testGate) Enter() error {
	if g.cut.Load() {
		return rdmamgr.ErrRevoked
	}
	g.users.Add(1)
	return nil
}

func (g *testGate) Leave() { g.users.Add(-1) }

// fakeAgent is an agentapi.Resolver standing in for a host agent with one
// attached process at slot via: the process's registry (proc) checks key
// and access as the process's shm owner would, and the agent registers
// the same pages (memfd, MAP_SHARED) as proxy regions of its own registry
// (agent), which the agent's ibverbs backend registers with the device.
type fakeAgent struct {
	via   uint16
	proc  *memreg.Registry
	agent *memreg.Registry
	inbox *backendtest.Inbox        // the process's
	over  atomic.Pointer[lateInbox] // not nil: Inbox gives it instead

	resolves atomic.Int64
	// block makes Resolve wait for its ctx (entered tells it began).
	block   atomic.Bool
	entered chan struct{}

	mu      sync.Mutex
	handles map[uint64]buffer.Buffer // proc's regions by id
	proxies map[uint64]buffer.Buffer // the agent's proxy of each
	gates   map[uint64]*testGate     // by proc region
	cuts    map[uint64]error         // proc regions cut: Resolve answers this
}

var _ agentapi.Resolver = (*fakeAgent)(nil)

// newFakeAgent returns a fake agent over b's registry, given to b as its
// resolver (before b's routes are made), closed at cleanup.
func newFakeAgent(t testing.TB, b *Backend, via uint16) *fakeAgent {
	t.Helper()
	proc := memreg.NewRegistry(ownerP, buffer.Limits{})
	f := &fakeAgent{
		via: via, proc: proc, agent: b.reg,
		inbox:   backendtest.NewInbox(proc, 64, 64),
		handles: make(map[uint64]buffer.Buffer),
		proxies: make(map[uint64]buffer.Buffer),
		gates:   make(map[uint64]*testGate),
		cuts:    make(map[uint64]error),
		entered: make(chan struct{}, 1),
	}
	if !wiring.SetResolver(b, f) {
		t.Fatal("SetResolver refused an *ibverbs.Backend")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := proc.Close(ctx); err != nil {
			t.Errorf("close the process's registry: %v", err)
		}
	})
	t.Cleanup(f.inbox.Close)
	return f
}

// region allocates n bytes in the process's registry (a memfd region).
func (f *fakeAgent) region(t testing.TB, n int, access buffer.Access) (buffer.Buffer, []byte) {
	t.Helper()
	h, err := f.proc.Allocate(uint64(n), access)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := f.proc.Bytes(h)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.handles[h.Region] = h
	f.mu.Unlock()
	return h, mem
}

func (f *fakeAgent) Resolve(ctx context.Context, via uint16, region uint64, key buffer.Key, need buffer.Access) (uint64, buffer.Key, error) {
	f.resolves.Add(1)
	if f.block.Load() {
		f.entered <- struct{}{}
		<-ctx.Done()
		return 0, buffer.Key{}, fmt.Errorf("fake agent: %w", ctx.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if via != f.via {
		return 0, buffer.Key{}, fmt.Errorf("fake agent: no process at slot %d: %w", via, rdmamgr.ErrPeerGone)
	}
	if err := f.cuts[region]; err != nil {
		return 0, buffer.Key{}, err
	}
	h, ok := f.handles[region]
	if !ok {
		return 0, buffer.Key{}, fmt.Errorf("fake agent: region %d: %w", region, rdmamgr.ErrReleased)
	}
	ref, err := f.proc.AcquireRemote(region, key, 0, h.Length, need)
	if err != nil {
		return 0, buffer.Key{}, err
	}
	mem := ref.Bytes()
	ref.Release()
	p, ok := f.proxies[region]
	if !ok {
		g := &testGate{}
		if p, err = f.agent.RegisterProxy(mem, h.Access, g); err != nil {
			return 0, buffer.Key{}, err
		}
		f.proxies[region], f.gates[region] = p, g
	}
	return p.Region, p.Key, nil
}

func (f *fakeAgent) Inbox(via uint16) (backend.Inbox, error) {
	if via != f.via {
		return nil, fmt.Errorf("fake agent: no process at slot %d: %w", via, rdmamgr.ErrPeerGone)
	}
	if li := f.over.Load(); li != nil {
		return li, nil
	}
	return f.inbox, nil
}

// cut does what the agent does on the process's cut notice: the gate
// refuses newcomers, the proxy is revoked (which deregisters its remote
// memory region and leaves the gate), and later resolves answer why.
func (f *fakeAgent) cut(t testing.TB, region uint64, why error) {
	t.Helper()
	f.mu.Lock()
	p, g := f.proxies[region], f.gates[region]
	f.cuts[region] = why
	delete(f.proxies, region)
	f.mu.Unlock()
	if g == nil {
		t.Fatalf("no proxy of region %d", region)
	}
	g.cut.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := f.agent.Revoke(ctx, p); err != nil {
		t.Fatalf("revoke the proxy: %v", err)
	}
	if n := g.users.Load(); n != 0 {
		t.Fatalf("the proxy's gate has %d users after its revoke (the device's registration holds one until it is gone)", n)
	}
}

// gate returns the gate of region's proxy (nil before its first resolve).
func (f *fakeAgent) gate(region uint64) *testGate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gates[region]
}
