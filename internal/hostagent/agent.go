//go:build linux

package hostagent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/hostid"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// maxProcs bounds the processes attached at once.
const maxProcs = 4096

// Agent is a host agent: the attach listener, the attached processes and
// their proxies, and the executor of their operations (package doc).
type Agent struct {
	cfg  Config
	mgr  *actor.Manager
	reg  *memreg.Registry // the manager's: proxies live there
	tcp  backend.Backend  // the manager's TCP backend: it serves via frames
	shm  *shm.Backend     // our shm initiator, over an empty registry
	log  *slog.Logger
	uid  int    // ours (a.mu: tests change it)
	addr string // our actor address, as processes name us to peers

	// farCheck, when set, must accept a far agent's address before we
	// dial it (SetFarCheck: the cluster's members).
	farCheck atomic.Pointer[func(ctx context.Context, addr string) error]

	life    context.Context // ends when Close starts
	endLife context.CancelFunc

	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // accept loop, processes, far-route setups

	mu sync.Mutex // guards the fields below
	// started and closed: Start ran; Close ran.
	started, closed bool
	ln              *net.UnixListener
	preAuth         int              // connections in their handshake
	procs           map[uint16]*proc // attached processes by slot
	// next is the slot handed out next: slots are never handed out twice
	// in the agent's life (takeSlot), so past maxSlot attaching fails.
	next uint32
	far  map[string]*farSet // routes to far agents by address
	// notAgents: addresses found no host agent, when (far.go).
	notAgents map[string]time.Time
	// farSetups counts far-route setups started (tests).
	farSetups atomic.Int64
}

// New returns an agent beside m, whose TCP backend is tcp; it does no I/O.
// The manager must be started (its address and id name the agent).
func New(cfg Config, m *actor.Manager, tcp backend.Backend) (*Agent, error) {
	if cfg.Socket == "" {
		return nil, fmt.Errorf("hostagent: no socket path: %w", rdmamgr.ErrInvalid)
	}
	if m == nil || m.PID() == nil || tcp == nil {
		return nil, fmt.Errorf("hostagent: a started manager and its TCP backend are needed: %w", rdmamgr.ErrInvalid)
	}
	if cfg.Routes == 0 {
		cfg.Routes = DefaultRoutes
	}
	if cfg.Routes < MinRoutes {
		return nil, fmt.Errorf("hostagent: %d routes per pair of hosts, want at least %d: %w", cfg.Routes, MinRoutes, rdmamgr.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	pid := m.PID()
	addr := pid.Address
	if pid.Id != actor.DefaultName {
		addr += "/" + pid.Id
	}
	reg := wiring.ManagerRegistry(m)
	log := cfg.Logger.With("component", "hostagent")
	// Our shm initiator maps processes' regions; its registry stays empty
	// (nothing of ours is for processes to map).
	sb, err := wiring.NewBackend[*shm.Backend](shm.Config{Secret: cfg.Secret, HostID: cfg.HostName}, memreg.NewRegistry(m.ID(), buffer.Limits{}), log)
	if err != nil {
		return nil, err
	}
	life, end := context.WithCancel(context.Background())
	return &Agent{cfg: cfg, mgr: m, reg: reg, tcp: tcp, shm: sb, log: log, uid: os.Getuid(), addr: addr,
		life: life, endLife: end, procs: make(map[uint16]*proc),
		next: 1, far: make(map[string]*farSet), notAgents: make(map[string]time.Time)}, nil
}

// Addr is the agent's actor address as processes name it to their peers:
// "host:port", or "host:port/name" for a manager not of the default name.
func (a *Agent) Addr() string { return a.addr }

// splitAddr parses an agent address (Addr) into the manager's actor
// address and name.
func splitAddr(s string) (addr, name string) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, actor.DefaultName
}

// Start starts the shm initiator, sets the TCP backend's resolver and
// listens on the attach socket.
func (a *Agent) Start(ctx context.Context) error {
	a.mu.Lock()
	if a.started || a.closed {
		a.mu.Unlock()
		return fmt.Errorf("hostagent: Start after Start or Close: %w", rdmamgr.ErrClosed)
	}
	a.started = true
	a.mu.Unlock()
	if a.cfg.HostID == ([HostIDSize]byte{}) {
		id, err := hostid.Of(a.cfg.HostName)
		if err != nil {
			return fmt.Errorf("hostagent: %w", err)
		}
		a.cfg.HostID = id
	}
	if err := a.shm.Start(ctx); err != nil {
		return fmt.Errorf("hostagent: shm: %w", err)
	}
	served := a.served()
	for i, b := range served {
		if !wiring.SetResolver(b, (*resolver)(a)) {
			a.unsetResolvers(served[:i])
			return fmt.Errorf("hostagent: backend %s takes no resolver: %w", b.Kind(), rdmamgr.ErrNotSupported)
		}
	}
	ln, err := agentwire.Listen(a.cfg.Socket, 0o660)
	if err != nil {
		a.unsetResolvers(served)
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		ln.Close()
		return fmt.Errorf("hostagent: closed during Start: %w", rdmamgr.ErrClosed)
	}
	a.ln = ln
	a.wg.Add(1)
	go a.acceptLoop(ln)
	a.log.Info("host agent listening", "socket", a.cfg.Socket, "addr", a.addr)
	return nil
}

// Close stops the listener (removing its socket), tells every attached
// process it goes, ends them (their operations cancelled, their proxies
// released), drops the routes to the far agents and waits. Idempotent.
// Later and concurrent calls wait for the first and return its error.
func (a *Agent) Close() error {
	a.closeOnce.Do(func() { a.closeErr = a.close() })
	return a.closeErr
}

func (a *Agent) close() error {
	a.mu.Lock()
	a.closed = true
	ln, started := a.ln, a.started
	procs := make([]*proc, 0, len(a.procs))
	for _, p := range a.procs {
		procs = append(procs, p)
	}
	a.mu.Unlock()
	a.endLife()
	if ln != nil {
		ln.Close() // unlinks the path (net.UnixListener does)
	}
	for _, p := range procs {
		p.goneAndEnd(rdmamgr.ErrClosed, "host agent stopping")
	}
	a.wg.Wait()
	a.dropFarRoutes()
	if started {
		a.unsetResolvers(a.served())
	}
	return a.shm.Close()
}

// served is the manager's backends that serve far agents' frames for our
// processes: TCP, and Config.Serving.
func (a *Agent) served() []backend.Backend {
	return append([]backend.Backend{a.tcp}, a.cfg.Serving...)
}

// unsetResolvers takes our resolver away from bs.
func (a *Agent) unsetResolvers(bs []backend.Backend) {
	for _, b := range bs {
		wiring.SetResolver(b, nil)
	}
}

// Procs returns the number of processes attached.
func (a *Agent) Procs() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.procs)
}

// maxSlot is the last slot an agent hands out (a TCP frame's via is 16
// bits); a variable for tests.
var maxSlot uint32 = 0xffff

// errSlotsSpent refuses an attach once every slot was handed out.
var errSlotsSpent = fmt.Errorf("hostagent: every slot (1..%d) was handed out in this agent's life; restart the agent (its processes re-attach by themselves): %w", maxSlot, rdmamgr.ErrLimit)

// takeSlot gives p a slot never handed out before in this agent's life
// (generation 1); at most maxProcs processes are attached.
//
// A slot is never reused: a far process's route names its target by
// (agent manager id, slot) only, and a frame between agents carries the
// slot alone (TCP request bytes 2:4; there is no room for a generation in
// a READ's or WRITE's header), so a slot handed out again would let a
// route set up to its old holder, idle since, reach the new one (a Send
// needs no key). A never-reused slot answers ErrPeerGone for good once its
// process went. After maxSlot attaches the agent refuses (ErrLimit): a
// restarted agent has a new manager id, so every slot is fresh again.
func (a *Agent) takeSlot(p *proc) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return fmt.Errorf("hostagent: %w", rdmamgr.ErrClosed)
	}
	if len(a.procs) >= maxProcs {
		return fmt.Errorf("hostagent: %d processes attached, the most: %w", len(a.procs), rdmamgr.ErrLimit)
	}
	if a.next == 0 {
		a.next = 1
	}
	if a.next > maxSlot {
		return errSlotsSpent
	}
	p.slot, p.gen = uint16(a.next), 1
	a.next++
	a.procs[p.slot] = p
	return nil
}

// slotLeft fails with errSlotsSpent once every slot was handed out.
func (a *Agent) slotLeft() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next > maxSlot {
		return errSlotsSpent
	}
	return nil
}

// dropSlot forgets p's slot: frames naming it are refused from now on.
func (a *Agent) dropSlot(p *proc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.slot != 0 && a.procs[p.slot] == p {
		delete(a.procs, p.slot)
	}
}

// procAt returns the live process at slot via.
func (a *Agent) procAt(via uint16) (*proc, error) {
	a.mu.Lock()
	p := a.procs[via]
	a.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("hostagent: no process at slot %d: %w", via, rdmamgr.ErrPeerGone)
	}
	return p, nil
}

// releaseTimeout bounds the release of one proxy (its Refs are cut, so
// this is only a safety net).
const releaseTimeout = 10 * time.Second
