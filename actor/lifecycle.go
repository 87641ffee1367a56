package actor

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/control"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// New builds a manager on sys: its id and registry. It does no I/O: Start
// does. Package node builds the backends over its registry between the
// two.
func New(sys *protoactor.ActorSystem, cfg Config) (*Manager, error) {
	cfg = cfg.withDefaults()
	var idb [8]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, err
	}
	id := binary.LittleEndian.Uint64(idb[:]) | 1 // never 0
	log := cfg.Logger.With("manager", fmt.Sprintf("%016x", id))
	book := control.BookOf(sys)
	book.SetLogger(log)
	life, endLife := context.WithCancel(context.Background())
	return &Manager{
		sys:    sys,
		cfg:    cfg,
		id:     id,
		reg:    memreg.NewRegistry(id, cfg.Limits),
		log:    log,
		routes: make(map[string]*routeEntry),
		qps:    make(map[uint64]*qpEntry),
		nonces: make(map[string]time.Time),

		remoteBytes:   make(map[uint64]remoteGrant),
		remotePerPeer: make(map[string]int),
		handshakes:    make(map[string]handshakeCount),
		book:          book,
		stop:          make(chan struct{}),
		life:          life,
		endLife:       endLife,
	}, nil
}

// Start spawns the manager actor under its name, serving over the started
// backends of choices (built over the manager's registry by package node),
// in order of preference for new routes (the last should be one every peer
// reaches, such as TCP); the left-out ones appear in the reasons of routes
// set up later. The manager owns the backends from here: Close closes
// them, and so does a Start that fails. Start protoactor remote on the
// system first for peers in other processes.
func (m *Manager) Start(ctx context.Context, choices ...Choice) error {
	var bs []backend.Backend
	for _, c := range choices {
		if c.Backend != nil {
			bs = append(bs, c.Backend)
		}
	}
	return m.start(ctx, bs, choices)
}

// start is Start over backends, the started ones among choices.
func (m *Manager) start(ctx context.Context, backends []backend.Backend, choices []Choice) error {
	m.mu.Lock()
	closed, started := m.closed, m.pid != nil || m.backends != nil
	if !closed && !started {
		m.backends, m.choices = backends, choices
	}
	m.mu.Unlock()
	var err error
	switch {
	case closed:
		err = fmt.Errorf("start manager %016x: %w", m.id, rdmamgr.ErrClosed)
	case started:
		err = fmt.Errorf("start manager %016x: already started", m.id)
	case len(backends) == 0:
		err = fmt.Errorf("start manager %016x: no backend: %w", m.id, rdmamgr.ErrNotSupported)
	}
	if err != nil {
		closeAll(backends)
		return err
	}
	m.reg.SetOwnerAddr(m.sys.Address())
	m.inbox.reg = m.reg
	for _, b := range backends {
		if u, ok := b.(backend.InboxUser); ok {
			u.SetInbox(&m.inbox)
		}
	}
	pid, err := m.sys.Root.SpawnNamed(protoactor.PropsFromProducer(func() protoactor.Actor { return &managerActor{m: m} }), m.cfg.Name)
	if err != nil {
		closeAll(backends)
		return fmt.Errorf("spawn manager %q: %w", m.cfg.Name, err)
	}
	m.mu.Lock()
	m.pid = pid
	m.wg.Add(1)
	m.mu.Unlock()
	go m.reaper()
	m.startOps()
	m.log.Info("manager started", "pid", pidString(pid), "backends", m.kinds(), "data", m.dataAddr())
	return nil
}

// closeAll closes bs and returns the first error.
func closeAll(bs []backend.Backend) error {
	var first error
	for _, b := range bs {
		if err := b.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close stops the actor, closes routes and the backends, releases every
// region and waits for the manager's goroutines. Idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.closed = true
	close(m.stop)
	m.endLife()
	pid := m.pid
	routes := m.routes
	for _, e := range routes {
		if e.linger != nil {
			e.linger.Stop()
		}
	}
	m.routes = make(map[string]*routeEntry)
	m.qps = make(map[uint64]*qpEntry)
	m.mu.Unlock()
	var errs []error
	if pid != nil {
		// Poison, not Stop: the actor first answers the requests already in
		// its mailbox (with CLOSED, see refuseClosed); protoactor would drop
		// them silently on Stop and their senders would wait for a timeout.
		// A fresh PID resolves through our own system, never through a
		// process another system cached in one (PID).
		if err := m.sys.Root.PoisonFuture(protoactor.NewPID(pid.Address, pid.Id)).Wait(); err != nil {
			errs = append(errs, fmt.Errorf("stop manager actor %s: %w", pidString(pid), err))
		}
	}
	m.wg.Wait()
	for _, e := range routes {
		<-e.ready
		if e.route != nil {
			e.route.Close()
		}
	}
	m.stopOps()
	errs = append(errs, closeAll(m.backends))
	m.inbox.closeAll() // after the backends: no landing is in progress
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs = append(errs, m.reg.Close(ctx))
	return errors.Join(errs...)
}
