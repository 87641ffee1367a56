//go:build linux

package hostagent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// farRoute returns the route to the far agent at addr (Agent.Addr's form)
// that pin takes and the far agent's manager id, setting the set or that
// route up if there is none or it went down (that route alone: the
// others serve on); callers for one agent or one route share one setup
// (bounded by ctx: a caller that gives up leaves it to the others).
func (a *Agent) farRoute(ctx context.Context, addr string, pin uint32) (backend.Route, uint64, error) {
	for {
		s, err := a.farSetOf(ctx, addr)
		if err != nil {
			return nil, 0, err
		}
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return nil, 0, fmt.Errorf("hostagent: %w", rdmamgr.ErrClosed)
		}
		if s.gone { // forgotten meanwhile: the next turn takes addr's new set
			a.mu.Unlock()
			continue
		}
		k := s.pick(pin)
		f := s.routes[k]
		var old *farRoute
		if f != nil && f.setupEnded() && (f.err != nil || routeDown(f.route)) {
			f, old = nil, f // down: replaced alone
		}
		if f == nil {
			f = &farRoute{ready: make(chan struct{}), k: k}
			s.routes[k] = f
			a.wg.Add(1)
			go a.setupFarRoute(f, addr)
		}
		a.mu.Unlock()
		if old != nil && old.release != nil {
			old.release()
		}
		select {
		case <-f.ready:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("hostagent: route to agent %s: %w: %w: %w", addr, rdmamgr.ErrPeerGone, rdmamgr.ErrUnknownPeer, ctx.Err())
		}
		switch {
		case f.limited():
			continue // the next turn takes route 0
		case f.err != nil:
			a.forgetFarRoute(s, f)
			if f.notAgent {
				a.forgetFar(addr, s)
				a.rememberNotAgent(addr)
			}
			return nil, 0, f.err
		case f.peerID != s.peerID || f.kind != s.kind:
			// The far agent restarted since the set was set up (its
			// other routes go to the agent that was), or the route took
			// another backend (the set's width is route 0's backend's):
			// all go together, and the next turn sets up a new set.
			a.forgetFar(addr, s)
			continue
		case routeDown(f.route):
			continue // the next turn replaces it
		}
		return f.route, f.peerID, nil
	}
}

// farSetOf returns the set of routes to the far agent at addr, setting it
// up if there is none (route 0 first: its backend says how many the set
// holds).
func (a *Agent) farSetOf(ctx context.Context, addr string) (*farSet, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, fmt.Errorf("hostagent: %w", rdmamgr.ErrClosed)
	}
	if at, ok := a.notAgents[addr]; ok {
		if time.Since(at) < notAgentHold {
			a.mu.Unlock()
			return nil, fmt.Errorf("hostagent: %s was found no host agent %v ago: %w", addr, time.Since(at).Round(time.Millisecond), ErrNotAgent)
		}
		delete(a.notAgents, addr)
	}
	s := a.far[addr]
	if s == nil {
		s = &farSet{ready: make(chan struct{})}
		a.far[addr] = s
		a.wg.Add(1)
		go a.setupFar(s, addr)
	}
	a.mu.Unlock()
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("hostagent: route to agent %s: %w: %w: %w", addr, rdmamgr.ErrPeerGone, rdmamgr.ErrUnknownPeer, ctx.Err())
	}
	if s.err != nil {
		a.forgetFar(addr, s)
		if s.notAgent {
			a.rememberNotAgent(addr)
		}
		return nil, s.err
	}
	return s, nil
}

// cachedFar is farRoute when the route pin takes is up already, else nil.
func (a *Agent) cachedFar(addr string, pin uint32) (backend.Route, uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.far[addr]
	if s == nil {
		return nil, 0
	}
	select {
	case <-s.ready:
	default:
		return nil, 0
	}
	if s.err != nil || s.gone {
		return nil, 0
	}
	f := s.routes[s.pick(pin)]
	if f == nil || !f.setupEnded() || f.err != nil || f.peerID != s.peerID || f.kind != s.kind || routeDown(f.route) {
		return nil, 0
	}
	return f.route, f.peerID
}

// setupFar sets up s: its route 0, then its width's other routes (in the
// background: an operation pinned to one waits for it).
func (a *Agent) setupFar(s *farSet, addr string) {
	defer a.wg.Done()
	defer close(s.ready)
	f := &farRoute{ready: make(chan struct{})}
	a.wg.Add(1)
	a.setupFarRoute(f, addr)
	if f.err != nil {
		s.err, s.notAgent = f.err, f.notAgent
		return
	}
	s.peerID, s.kind = f.peerID, f.kind
	s.routes = make([]*farRoute, a.farWidth(f.kind, f.peerID))
	s.routes[0] = f
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := 1; k < len(s.routes) && !a.closed && !s.gone; k++ {
		s.routes[k] = &farRoute{ready: make(chan struct{}), k: k}
		a.wg.Add(1)
		go a.setupFarRoute(s.routes[k], addr)
	}
}

// setupFarRoute sets up f, the manager's route f.k to the far agent
// (within the manager's route timeout, and our life), to a far agent
// only: with a membership check (SetFarCheck) the address must pass it
// before we dial, and a route whose handshake says the far end is no host
// agent (agentapi.FarAgent) is dropped.
func (a *Agent) setupFarRoute(f *farRoute, addr string) {
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
	r, peerID, kind, release, err := wiring.SharedRoute(a.mgr, a.life, host, name, f.k)
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
		// route to the far process; the next one is set up afresh. Past
		// the manager's MaxRoutes it is a limit.
		if !errors.Is(err, rdmamgr.ErrLimit) {
			err = fmt.Errorf("%w: %w", rdmamgr.ErrPeerGone, err)
		}
		f.err = fmt.Errorf("hostagent: route %d to agent %s: %w", f.k, addr, err)
		return
	}
	f.route, f.peerID, f.kind, f.release = r, peerID, kind, release
}

// forgetFar drops s, if it is still addr's, and the references of its
// routes.
func (a *Agent) forgetFar(addr string, s *farSet) {
	a.mu.Lock()
	if a.far[addr] != s {
		a.mu.Unlock()
		return
	}
	delete(a.far, addr)
	a.mu.Unlock()
	a.releaseSet(s)
}

// dropFarRoutes drops every far route's reference (Close, once nothing
// posts any more).
func (a *Agent) dropFarRoutes() {
	a.mu.Lock()
	fs := a.far
	a.far = make(map[string]*farSet)
	a.mu.Unlock()
	for _, s := range fs {
		a.releaseSet(s)
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
