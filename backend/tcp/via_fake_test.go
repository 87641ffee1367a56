package tcp

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// ownerP is the manager id of the fake attached process.
const ownerP = 0x9000

// fakeAgent is an agentapi.Resolver standing in for a host agent with one
// attached process at slot via: the process's registry (proc) checks the
// key, access and bounds of its region as the process's shm owner would,
// and the agent registers the same memory in its own registry (agent, the
// TCP backend's) as the proxy region it resolves to.
type fakeAgent struct {
	via   uint16
	proc  *memreg.Registry
	agent *memreg.Registry
	inbox *backendtest.Inbox // the process's inbox (over proc)

	resolves atomic.Int64
	// block, when set, makes Resolve wait for ctx (and report it).
	block atomic.Bool
	// narrow, when set, makes each proxy admit only the access it was
	// resolved for (one proxy per region and need).
	narrow  atomic.Bool
	blocked chan context.Context

	mu      sync.Mutex
	fail    error                    // Resolve's error, when set
	handles map[uint64]buffer.Buffer // proc's regions by id
	proxies map[uint64]buffer.Buffer // the agent's proxy of each
	narrowP map[[2]uint64]buffer.Buffer
	last    time.Time // deadline of the last Resolve's ctx
}

var _ agentapi.Resolver = (*fakeAgent)(nil)

func newFakeAgent(agent *memreg.Registry, via uint16) *fakeAgent {
	proc := memreg.NewRegistry(ownerP, buffer.Limits{})
	return &fakeAgent{
		via: via, proc: proc, agent: agent,
		inbox:   backendtest.NewInbox(proc, 64, 64),
		blocked: make(chan context.Context, 1),
		handles: make(map[uint64]buffer.Buffer),
		proxies: make(map[uint64]buffer.Buffer),
		narrowP: make(map[[2]uint64]buffer.Buffer),
	}
}

// newTestFakeAgent is newFakeAgent whose process's registry and inbox are
// closed at t's cleanup.
func newTestFakeAgent(t testing.TB, agent *memreg.Registry, via uint16) *fakeAgent {
	f := newFakeAgent(agent, via)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := f.proc.Close(ctx); err != nil {
			t.Errorf("close the process's registry: %v", err)
		}
	})
	t.Cleanup(f.inbox.Close)
	return f
}

// region allocates n bytes in the process's registry and returns the
// handle and memory (off the Go heap, as a process's exported region is:
// the race detector does not see the socket's order, as with the
// package's other tests' regions).
func (f *fakeAgent) region(n uint64, access buffer.Access) (buffer.Buffer, []byte, error) {
	h, err := f.proc.Allocate(n, access)
	if err != nil {
		return h, nil, err
	}
	mem, err := f.proc.Bytes(h)
	if err != nil {
		return h, nil, err
	}
	f.mu.Lock()
	f.handles[h.Region] = h
	f.mu.Unlock()
	return h, mem, nil
}

func (f *fakeAgent) setFail(err error) {
	f.mu.Lock()
	f.fail = err
	f.mu.Unlock()
}

// dropProxy releases the agent's proxy of the process's region (as an
// agent does when it unmaps it); the next Resolve makes a new one.
func (f *fakeAgent) dropProxy(region uint64) error {
	f.mu.Lock()
	p, ok := f.proxies[region]
	delete(f.proxies, region)
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("no proxy of region %d", region)
	}
	return f.agent.Release(context.Background(), p)
}

// proxy returns the agent's proxy of the process's region, if made.
func (f *fakeAgent) proxy(region uint64) (buffer.Buffer, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.proxies[region]
	return p, ok
}

func (f *fakeAgent) Resolve(ctx context.Context, via uint16, region uint64, key buffer.Key, need buffer.Access) (uint64, buffer.Key, error) {
	f.resolves.Add(1)
	if dl, ok := ctx.Deadline(); ok {
		f.mu.Lock()
		f.last = dl
		f.mu.Unlock()
	}
	if f.block.Load() {
		f.blocked <- ctx
		<-ctx.Done()
		return 0, buffer.Key{}, fmt.Errorf("fake agent: %w: %w", ctx.Err(), rdmamgr.ErrDeadline)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return 0, buffer.Key{}, f.fail
	}
	if via != f.via {
		return 0, buffer.Key{}, fmt.Errorf("fake agent: no process at slot %d: %w", via, rdmamgr.ErrPeerGone)
	}
	h, ok := f.handles[region]
	if !ok {
		return 0, buffer.Key{}, fmt.Errorf("fake agent: region %d: %w", region, rdmamgr.ErrReleased)
	}
	// The process's owner checks the key and access (the shm map request).
	ref, err := f.proc.AcquireRemote(region, key, 0, h.Length, need)
	if err != nil {
		return 0, buffer.Key{}, err
	}
	mem := ref.Bytes()
	ref.Release()
	if f.narrow.Load() {
		k := [2]uint64{region, uint64(need)}
		p, ok := f.narrowP[k]
		if !ok {
			if p, err = f.agent.Register(mem, need); err != nil {
				return 0, buffer.Key{}, err
			}
			f.narrowP[k] = p
		}
		return p.Region, p.Key, nil
	}
	p, ok := f.proxies[region]
	if !ok {
		if p, err = f.agent.Register(mem, h.Access); err != nil {
			return 0, buffer.Key{}, err
		}
		f.proxies[region] = p
	}
	return p.Region, p.Key, nil
}

func (f *fakeAgent) Inbox(via uint16) (backend.Inbox, error) {
	if via != f.via {
		return nil, fmt.Errorf("fake agent: no process at slot %d: %w", via, rdmamgr.ErrPeerGone)
	}
	return f.inbox, nil
}

// lastDeadline is the deadline of the last Resolve's context.
func (f *fakeAgent) lastDeadline() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}
