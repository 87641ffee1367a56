//go:build linux

package hostagent

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// farRoute is our manager's shared route to a far agent, with the one
// reference the agent holds on it (wiring.SharedRoute): every process's
// operations to that agent go over it.
type farRoute struct {
	ready   chan struct{} // closed when the setup ended; then below is fixed
	route   backend.Route
	peerID  uint64 // the far agent's manager id (the route handshake's)
	release func()
	err     error
	// notAgent: the route handshake said the far end is no host agent.
	notAgent bool
}

// farRoute returns the route to the far agent at addr (Agent.Addr's form)
// and the far agent's manager id, setting it up if there is none or it went down; callers for one agent
// share one setup (bounded by ctx: a caller that gives up leaves it to
// the others).
func (a *Agent) farRoute(ctx context.Context, addr string) (backend.Route, uint64, error) {
	for {
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return nil, 0, fmt.Errorf("hostagent: %w", rdmamgr.ErrClosed)
		}
		if at, ok := a.notAgents[addr]; ok {
			if time.Since(at) < notAgentHold {
				a.mu.Unlock()
				return nil, 0, fmt.Errorf("hostagent: %s was found no host agent %v ago: %w", addr, time.Since(at).Round(time.Millisecond), ErrNotAgent)
			}
			delete(a.notAgents, addr)
		}
		f := a.far[addr]
		if f == nil {
			f = &farRoute{ready: make(chan struct{})}
			a.far[addr] = f
			a.wg.Add(1)
			go a.setupFar(f, addr)
		}
		a.mu.Unlock()
		select {
		case <-f.ready:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("hostagent: route to agent %s: %w: %w: %w", addr, rdmamgr.ErrPeerGone, rdmamgr.ErrUnknownPeer, ctx.Err())
		}
		if f.err != nil {
			a.forgetFar(addr, f)
			if f.notAgent {
				a.rememberNotAgent(addr)
			}
			return nil, 0, f.err
		}
		select {
		case <-f.route.Done():
			a.forgetFar(addr, f) // down: the next turn sets up another
			continue
		default:
			return f.route, f.peerID, nil
		}
	}
}

// cachedFar is farRoute when the route is up already, else nil.
func (a *Agent) cachedFar(addr string) (backend.Route, uint64) {
	a.mu.Lock()
	f := a.far[addr]
	a.mu.Unlock()
	if f == nil {
		return nil, 0
	}
	select {
	case <-f.ready:
	default:
		return nil, 0
	}
	if f.err != nil {
		return nil, 0
	}
	select {
	case <-f.route.Done():
		return nil, 0
	default:
		return f.route, f.peerID
	}
}

// setupFar sets up f's route (within the manager's route timeout, and
// our life), to a far agent only: with a membership check (SetFarCheck)
// the address must pass it before we dial, and a route whose handshake
// says the far end is no host agent (agentapi.FarAgent) is dropped.
func (a *Agent) setupFar(f *farRoute, addr string) {
	defer a.wg.Done()
	defer close(f.ready)
	a.farSetups.Add(1)
	if check := a.farCheck.Load(); check != nil {
		ctx, cancel := context.WithTimeout(a.life, farCheckTimeout)
		err := (*check)(ctx, addr)
		cancel()
		if err != nil {
			f.err = fmt.Errorf("hostagent: %s: %v: %w", addr, err, ErrNotAgent)
			return
		}
	}
	host, name := splitAddr(addr)
	r, peerID, release, err := wiring.SharedRoute(a.mgr, a.life, host, name)
	if err == nil {
		if fa, ok := r.(agentapi.FarAgent); ok && !fa.FarIsAgent() {
			release() // the manager closes it once it lingered unused
			f.notAgent = true
			f.err = fmt.Errorf("hostagent: the manager at %s says it is no host agent: %w", addr, ErrNotAgent)
			return
		}
	}
	if err != nil {
		// The process's operation answers PEER_GONE (not INTERNAL: an
		// unreachable agent has no wire code of its own), which ends its
		// route to the far process; the next one is set up afresh.
		f.err = fmt.Errorf("hostagent: route to agent %s: %w: %w", addr, rdmamgr.ErrPeerGone, err)
		return
	}
	f.route, f.peerID, f.release = r, peerID, release
}

// forgetFar drops f, if it is still addr's, and its reference.
func (a *Agent) forgetFar(addr string, f *farRoute) {
	a.mu.Lock()
	if a.far[addr] == f {
		delete(a.far, addr)
	} else {
		f = nil
	}
	a.mu.Unlock()
	if f != nil && f.release != nil {
		f.release()
	}
}

// dropFarRoutes drops every far route's reference (Close, once nothing
// posts any more).
func (a *Agent) dropFarRoutes() {
	a.mu.Lock()
	fs := a.far
	a.far = make(map[string]*farRoute)
	a.mu.Unlock()
	for _, f := range fs {
		<-f.ready
		if f.release != nil {
			f.release()
		}
	}
}

// notAgentHold is how long an address found no host agent is refused
// without a new dial; maxNotAgents bounds the addresses remembered.
const (
	notAgentHold = time.Minute
	maxNotAgents = 1024
)

// rememberNotAgent refuses addr for notAgentHold without dialling it.
func (a *Agent) rememberNotAgent(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.notAgents) >= maxNotAgents {
		clear(a.notAgents) // forgetting only costs a dial each
	}
	a.notAgents[addr] = time.Now()
}

// farCheckTimeout bounds one membership check of a far agent address.
const farCheckTimeout = 5 * time.Second

// ErrNotAgent refuses a post whose far agent address is not one the agent
// may dial: not a member of its cluster (SetFarCheck), or a manager whose
// route handshake says it is no host agent. It wraps
// rdmamgr.ErrUnauthenticated (the process hears UNAUTHENTICATED).
var ErrNotAgent = fmt.Errorf("hostagent: not a host agent this agent may dial: %w", rdmamgr.ErrUnauthenticated)

// ErrDialBudget refuses a post that would make the agent set up a far
// route for a process whose last maxFarFails setups failed within
// farFailWindow. It wraps rdmamgr.ErrLimit.
var ErrDialBudget = fmt.Errorf("hostagent: too many failed far-agent routes for this process: %w", rdmamgr.ErrLimit)

// maxFarFails and farFailWindow bound the far-route setups that fail for
// one process (an unreachable address, one that is no agent): past
// maxFarFails within farFailWindow, its posts that need a new far route
// are refused with ErrDialBudget until the window ends; routes that are
// up serve on. (Variables: tests change them.)
var (
	maxFarFails   atomic.Int64
	farFailWindow = time.Minute
)

func init() { maxFarFails.Store(8) }

// SetFarCheck makes the agent dial only far agent addresses (Addr's form)
// that check accepts, e.g. its cluster's members (nil: any, as long as
// the route's handshake says it is an agent). A refusal answers the post
// with ErrNotAgent.
func (a *Agent) SetFarCheck(check func(ctx context.Context, addr string) error) {
	if check == nil {
		a.farCheck.Store(nil)
		return
	}
	a.farCheck.Store(&check)
}

// farBudget fails with ErrDialBudget while p spent its failed setups.
func (p *proc) farBudget() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if int64(p.farFails) >= maxFarFails.Load() && time.Since(p.farFailStart) < farFailWindow {
		return fmt.Errorf("hostagent: pid %d: %d failed within %v: %w", p.pid, p.farFails, farFailWindow, ErrDialBudget)
	}
	return nil
}

// farFailed counts a failed far-route setup against p.
func (p *proc) farFailed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.farFailStart) >= farFailWindow {
		p.farFails, p.farFailStart = 0, time.Now()
	}
	p.farFails++
}

// spawn runs f in a goroutine the agent's Close waits for, unless the
// agent is closing (then it reports false and f does not run).
func (a *Agent) spawn(f func()) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f()
	}()
	return true
}
