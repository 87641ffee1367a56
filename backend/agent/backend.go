package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

func init() {
	wiring.SetBackend(New)
}

// Backend is the process's agent backend: routes to processes of other
// hosts through the host agents both ends are attached to.
type Backend struct {
	cfg Config
	log *slog.Logger
	reg *memreg.Registry // the process's: bounce regions (bounce.go)

	life context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex // guards the fields below
	cur     *attachment
	started bool
	closed  bool
}

var (
	_ backend.Backend      = (*Backend)(nil)
	_ backend.Capabilities = (*Backend)(nil)
	_ backend.ListPoster   = (*route)(nil)
)

// New builds the backend (no I/O: Start attaches). The registry is the
// process manager's; the agent maps its regions through the shm backend.
func New(cfg Config, reg *memreg.Registry, log *slog.Logger) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	life, stop := context.WithCancel(context.Background())
	return &Backend{cfg: cfg, reg: reg, log: log.With("backend", "agent", "socket", cfg.Socket), life: life, stop: stop}, nil
}

// Kind is backend.KindAgent.
func (b *Backend) Kind() backend.Kind { return backend.KindAgent }

// Supports implements backend.Capabilities: every operation (the agents'
// TCP routes carry them all).
func (b *Backend) Supports(backend.Op) bool { return true }

// Start tries to attach once (bounded by ctx and HandshakeTimeout), then
// keeps the process attached in the background: an agent that is not
// there is logged and tried again every Retry; one that goes is
// re-attached when it is back. Without an agent the backend refuses
// routes (ErrNotSupported) and the manager uses the next backend. Start
// fails only when called twice or after Close.
func (b *Backend) Start(ctx context.Context) error {
	b.mu.Lock()
	if b.started || b.closed {
		b.mu.Unlock()
		return fmt.Errorf("agent: Start after Start or Close: %w", rdmamgr.ErrClosed)
	}
	b.started = true
	b.mu.Unlock()
	err := b.tryAttach(ctx)
	if err != nil {
		b.log.Warn("no host agent: routes to other hosts go direct; retrying in the background", "every", b.cfg.Retry, "err", err)
	}
	b.wg.Add(1)
	go b.keepAttached(err == nil)
	return nil
}

// tryAttach attaches once and makes the attachment current.
func (b *Backend) tryAttach(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.life, cancel)
	defer stop()
	conn, w, version, err := attach(ctx, &b.cfg)
	if err != nil {
		return err
	}
	a := newAttachment(b, conn, w, version)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		a.shutdown(0)
		return fmt.Errorf("agent: %w", rdmamgr.ErrClosed)
	}
	b.cur = a
	b.mu.Unlock()
	b.log.Info("attached to the host agent", "slot", w.Slot, "generation", w.Generation, "agent", w.AgentAddr)
	return nil
}

// keepAttached re-attaches after the agent went, every Retry, until Close.
func (b *Backend) keepAttached(attached bool) {
	defer b.wg.Done()
	logged := !attached // the first failure was logged by Start
	for {
		b.mu.Lock()
		a := b.cur
		b.mu.Unlock()
		if a != nil {
			select {
			case <-a.done:
			case <-b.life.Done():
				return
			}
			continue
		}
		t := time.NewTimer(b.cfg.Retry)
		select {
		case <-t.C:
		case <-b.life.Done():
			t.Stop()
			return
		}
		err := b.tryAttach(b.life)
		switch {
		case err == nil:
			logged = false
		case errors.Is(err, rdmamgr.ErrClosed) || b.life.Err() != nil:
			return
		case !logged:
			b.log.Warn("host agent not there: routes to other hosts go direct; retrying", "every", b.cfg.Retry, "err", err)
			logged = true
		default:
			b.log.Debug("host agent still not there", "err", err)
		}
	}
}

// lost is called by an attachment when it ended.
func (b *Backend) lost(a *attachment, cause error) {
	b.mu.Lock()
	if b.cur == a {
		b.cur = nil
	}
	closed := b.closed
	b.mu.Unlock()
	if !closed {
		b.log.Warn("host agent gone: its routes failed; re-attaching", "slot", a.w.Slot, "err", cause)
	}
}

// closedErr is ErrClosed after Close, ErrNotStarted before Start.
func (b *Backend) closedErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return fmt.Errorf("agent: backend closed: %w", rdmamgr.ErrClosed)
	case !b.started:
		return fmt.Errorf("agent: %w", rdmamgr.ErrNotStarted)
	}
	return nil
}

// current returns the live attachment, or nil.
func (b *Backend) current() *attachment {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cur
}

// Addr says where the agent is and whether we are attached.
func (b *Backend) Addr() string {
	if a := b.current(); a != nil {
		return fmt.Sprintf("%s (slot %d, agent %s)", b.cfg.Socket, a.w.Slot, a.w.AgentAddr)
	}
	return b.cfg.Socket + " (not attached)"
}

// errNotAttached is why routes do not go through an agent now.
func (b *Backend) errNotAttached() error {
	return fmt.Errorf("agent: not attached to a host agent (%s): %w", b.cfg.Socket, rdmamgr.ErrNotSupported)
}

// PrepareRoute refuses (ErrNotSupported) when not attached; else its info
// names our host (the agent's host id), our slot and our agent.
func (b *Backend) PrepareRoute(ctx context.Context, _ uint64) (backend.PendingRoute, []byte, error) {
	if err := b.closedErr(); err != nil {
		return nil, nil, err
	}
	a := b.current()
	if a == nil {
		return nil, nil, b.errNotAttached()
	}
	info := routeInfo{host: a.w.HostID, slot: a.w.Slot, agent: a.w.AgentAddr}
	return &pending{b: b, a: a}, info.encode(), nil
}

// AcceptRoute refuses (ErrNotSupported) when not attached or when the
// initiator is on this host (shm is the way there); else it answers with
// our slot, our agent's address and its manager id. No state: the route is the
// initiator's, and the agents carry its operations.
func (b *Backend) AcceptRoute(ctx context.Context, _ uint64, info []byte) ([]byte, error) {
	i, err := decodeInfo(info)
	if err != nil {
		return nil, err
	}
	if err := b.closedErr(); err != nil {
		return nil, err
	}
	a := b.current()
	if a == nil {
		return nil, b.errNotAttached()
	}
	if i.host == a.w.HostID {
		return nil, fmt.Errorf("agent: the initiator is on this host: %w", rdmamgr.ErrNotSupported)
	}
	ans := routeAnswer{slot: a.w.Slot, agent: a.w.AgentAddr, agentID: a.w.AgentID}
	return ans.encode(), nil
}

// Served is zero: the agent serves peers, not this backend.
func (b *Backend) Served() backend.ServedStats { return backend.ServedStats{} }

// Close detaches (the agent ends what it still runs for us, then closes
// the socket; CloseTimeout bounds the wait) and waits for the backend's
// goroutines. Idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	a := b.cur
	b.mu.Unlock()
	b.stop()
	if a != nil {
		a.shutdown(b.cfg.CloseTimeout)
	}
	b.wg.Wait()
	return nil
}

// shutdown ends the attachment from our side: our write side closes (the
// agent sees the end, cancels what it runs for us and closes), then,
// after wait at most, the socket; it waits for the loops.
func (a *attachment) shutdown(wait time.Duration) {
	a.conn.CloseWrite()
	t := time.NewTimer(wait)
	select {
	case <-a.done:
	case <-t.C:
	}
	t.Stop()
	a.end(fmt.Errorf("agent: detached: %w", rdmamgr.ErrClosed))
	a.wg.Wait()
}

// SetInbox implements backend.InboxUser: events and messages for us come
// from our agent over its shm route, so they reach our shm backend's inbox
// (the same one the manager gives it; setting it again is harmless).
func (b *Backend) SetInbox(in backend.Inbox) {
	if u, ok := b.cfg.SHM.(backend.InboxUser); ok {
		u.SetInbox(in)
	}
}
