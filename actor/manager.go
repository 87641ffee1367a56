package actor

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/ibverbs"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// handshakeAttempt bounds one try of the route handshake.
const handshakeAttempt = 2 * time.Second

// ProtocolVersion is the version of the manager-to-manager handshake.
const ProtocolVersion = 1

// DefaultName is the actor name of a manager.
const DefaultName = "rdma-manager"

// Config configures a Manager. Zero fields take defaults.
type Config struct {
	// Name is the manager's actor name (DefaultName).
	Name string
	// Backend selects the data plane: "tcp" (default), "ibverbs" or
	// "auto". With ibverbs or auto the manager runs TCP beside it, so peers
	// without RDMA still reach its buffers; auto falls back to TCP alone
	// when no usable RDMA device exists, and logs why.
	Backend backend.Kind
	// TCP configures the TCP backend.
	TCP tcp.Config
	// IBVerbs configures the ibverbs backend.
	IBVerbs ibverbs.Config
	// Limits bound the registry; zero fields take DefaultLimits' values
	// (limits.go).
	Limits buffer.Limits
	// MaxRemoteBytes caps the bytes that remote peers may hold through
	// RequestBuffer at once (0: DefaultMaxRemoteBytes).
	MaxRemoteBytes uint64
	// MaxRemoteBuffersPerPeer caps the buffers one remote peer holds
	// (DefaultMaxRemoteBuffersPerPeer).
	MaxRemoteBuffersPerPeer int
	// RemoteLease is the lease given to buffers remote peers request
	// without asking for one (0: DefaultRemoteLease; negative: none).
	RemoteLease time.Duration
	// HandshakesPerPeer caps the route handshakes accepted from one peer
	// per 30 s (DefaultHandshakesPerPeer).
	HandshakesPerPeer int
	// MaxLease caps any lease (24 h).
	MaxLease time.Duration
	// ReapInterval is how often buffers whose lease ran out are released
	// (1 s).
	ReapInterval time.Duration
	// MaxRoutes bounds the routes to peers (DefaultMaxRoutes).
	MaxRoutes int
	// RouteTimeout bounds a route setup (10 s).
	RouteTimeout time.Duration
	// OpTimeout is the default deadline of Put and Get (30 s).
	OpTimeout time.Duration
	// RequestTimeout bounds actor request round trips (10 s).
	RequestTimeout time.Duration
	// MaxMessageSize bounds control messages (DefaultMaxMessageSize).
	MaxMessageSize int
	// Secret is shared by the managers of one deployment: the route
	// handshake and every data connection prove it. The zero Secret turns
	// authentication off (loopback-only deployments).
	Secret backend.Secret
	// Logger receives the manager's logs; nil discards them.
	Logger *slog.Logger
	// Metrics, when not nil, counts operations and route setups (metrics.go).
	Metrics *Metrics
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Backend == "" {
		c.Backend = backend.KindTCP
	}
	if c.MaxRoutes == 0 {
		c.MaxRoutes = DefaultMaxRoutes
	}
	d := DefaultLimits()
	setIfZero(&c.Limits.MaxBytes, d.MaxBytes)
	setIfZero(&c.Limits.MaxRegions, d.MaxRegions)
	setIfZero(&c.Limits.MaxRegion, min(d.MaxRegion, c.Limits.MaxBytes))
	setIfZero(&c.MaxRemoteBytes, min(DefaultMaxRemoteBytes(), c.Limits.MaxBytes))
	setIfZero(&c.MaxRemoteBuffersPerPeer, DefaultMaxRemoteBuffersPerPeer)
	setIfZero(&c.RemoteLease, DefaultRemoteLease)
	c.RemoteLease = max(c.RemoteLease, 0)
	setIfZero(&c.HandshakesPerPeer, DefaultHandshakesPerPeer)
	if c.IBVerbs == (ibverbs.Config{}) {
		c.IBVerbs = ibverbs.DefaultConfig() // GID index auto, not 0
	}
	if c.MaxLease == 0 {
		c.MaxLease = 24 * time.Hour
	}
	if c.ReapInterval == 0 {
		c.ReapInterval = time.Second
	}
	if c.RouteTimeout == 0 {
		c.RouteTimeout = 10 * time.Second
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = queuepair.DefaultTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Manager is one endpoint's RDMA manager: registry, backend, routes and the
// actor that serves them.
type Manager struct {
	sys *protoactor.ActorSystem
	cfg Config
	id  uint64
	reg *memreg.Registry
	// backends in order of preference for new routes; TCP is always last.
	// Fixed after Start.
	backends []backend.Backend
	tcp      *tcp.Backend
	rdma     backend.Backend // nil without an RDMA backend
	log      *slog.Logger

	mu sync.Mutex // guards the fields below
	// pid is set by Start.
	pid    *protoactor.PID
	routes map[string]*routeEntry // by peer PID "address/id"
	// nonces of accepted handshakes, until they expire: a replayed
	// handshake is refused.
	nonces map[string]time.Time
	qps    map[uint64]*qpEntry
	nextQP uint64
	closed bool
	// remoteBytes are the regions remote peers requested, by region id;
	// remoteTotal is their bytes (capped by MaxRemoteBytes) and
	// remotePerPeer their count by peer (capped by
	// MaxRemoteBuffersPerPeer).
	remoteBytes   map[uint64]remoteGrant
	remoteTotal   uint64
	remotePerPeer map[string]int
	// handshakes counts route handshakes by peer (HandshakesPerPeer).
	handshakes map[string]handshakeCount
	stop       chan struct{} // closed by Close: stops the reaper

	// life ends when Close starts: route setups in progress give up
	// instead of holding Close for their timeout.
	life    context.Context
	endLife context.CancelFunc

	wg sync.WaitGroup // route setups and replies sent from goroutines

	authFailures atomic.Uint64
	// book counts refusals and samples their logs (shared with the
	// remote guard of the same actor system).
	book *refusals

	ops opsState // uptime, inbound routes, route watchers (ops.go)
}

// maxNonces bounds the replay cache; past it new handshakes are refused
// until old nonces expire.
const maxNonces = 1 << 16

const (
	labelHandshake = "rdmamgr route handshake v1"
	labelReply     = "rdmamgr route reply v1"
)

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func handshakeMAC(s backend.Secret, hs *rdmapb.RouteHandshake) []byte {
	return s.MAC(labelHandshake, u64(uint64(hs.Version)), u64(hs.InitiatorId), []byte(hs.InitiatorAddr),
		[]byte(hs.Backend), hs.Endpoint, hs.Nonce)
}

func replyMAC(s backend.Secret, nonce []byte, r *rdmapb.RouteHandshakeResponse) []byte {
	var code uint64
	if r.Error != nil {
		code = uint64(r.Error.Code)
	}
	return s.MAC(labelReply, nonce, u64(uint64(r.Version)), u64(r.ResponderId), []byte(r.Backend), r.Endpoint, u64(code))
}

// routeEntry is the cached route to one peer manager.
type routeEntry struct {
	key   string
	peer  *protoactor.PID
	ready chan struct{} // closed when setup ended; then the fields below are fixed
	route backend.Route
	// peerID is the peer manager's id.
	peerID uint64
	kind   backend.Kind
	err    error
	// refs counts queue pairs on the route; guarded by Manager.mu.
	refs  int
	since time.Time // when setup ended
}

type qpEntry struct {
	qp    *queuepair.QueuePair
	route *routeEntry
	taken bool // handed to the local caller; guarded by Manager.mu
	made  time.Time
}

// New builds a manager on sys. It does no I/O: Start does.
func New(sys *protoactor.ActorSystem, cfg Config) (*Manager, error) {
	cfg = cfg.withDefaults()
	var idb [8]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, err
	}
	id := binary.LittleEndian.Uint64(idb[:]) | 1 // never 0
	reg := memreg.NewRegistry(id, cfg.Limits)
	log := cfg.Logger.With("manager", fmt.Sprintf("%016x", id))
	cfg.TCP.Secret = cfg.Secret
	dataNearRemote(&cfg.TCP, sys.Address()) // advertise.go
	t, err := tcp.New(cfg.TCP, reg, log)
	if err != nil {
		return nil, err
	}
	switch cfg.Backend {
	case backend.KindTCP, backend.KindIBVerbs, KindAuto:
	default:
		return nil, fmt.Errorf("backend %q (want tcp, ibverbs or auto): %w", cfg.Backend, backend.ErrNotSupported)
	}
	book := refusalsOf(sys)
	book.setLogger(log)
	life, endLife := context.WithCancel(context.Background())
	return &Manager{
		sys:    sys,
		cfg:    cfg,
		id:     id,
		reg:    reg,
		tcp:    t,
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

// Start starts the backend and spawns the manager actor under its name.
// Start protoactor remote on the system first for peers in other processes.
func (m *Manager) Start(ctx context.Context) error {
	m.reg.SetOwnerAddr(m.sys.Address())
	if m.cfg.Backend != backend.KindTCP {
		rb, err := m.startRDMA(ctx)
		switch {
		case err == nil:
			m.rdma = rb
			m.backends = append(m.backends, rb)
		case m.cfg.Backend == KindAuto && errors.Is(err, ibverbs.ErrNotBuilt):
			m.log.Info("no RDMA device: using TCP only", "err", err) // the expected state of a build without ibverbs
		case m.cfg.Backend == KindAuto:
			m.log.Warn("no usable RDMA device: using TCP only", "err", err)
		default:
			return err
		}
	}
	if err := m.tcp.Start(ctx); err != nil {
		m.closeBackends()
		return err
	}
	m.backends = append(m.backends, m.tcp)
	pid, err := m.sys.Root.SpawnNamed(protoactor.PropsFromProducer(func() protoactor.Actor { return &managerActor{m: m} }), m.cfg.Name)
	if err != nil {
		m.closeBackends()
		return fmt.Errorf("spawn manager %q: %w", m.cfg.Name, err)
	}
	m.mu.Lock()
	m.pid = pid
	m.wg.Add(1)
	m.mu.Unlock()
	go m.reaper()
	m.startOps()
	m.log.Info("manager started", "pid", PIDString(pid), "backends", m.kinds(), "data", m.tcp.Addr())
	return nil
}

// KindAuto picks ibverbs where a usable device exists and TCP otherwise.
const KindAuto backend.Kind = "auto"

func (m *Manager) startRDMA(ctx context.Context) (backend.Backend, error) {
	b, err := ibverbs.New(m.cfg.IBVerbs, m.reg, m.log)
	if err != nil {
		return nil, err
	}
	if err := b.Start(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("ibverbs: %w", err)
	}
	return b, nil
}

func (m *Manager) closeBackends() error {
	var first error
	if m.rdma != nil {
		first = m.rdma.Close()
	}
	if err := m.tcp.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

// kinds names the running backends, preferred first ("ibverbs+tcp").
func (m *Manager) kinds() string {
	s := ""
	for i, b := range m.backends {
		if i > 0 {
			s += "+"
		}
		s += string(b.Kind())
	}
	return s
}

func (m *Manager) backendOf(k backend.Kind) backend.Backend {
	for _, b := range m.backends {
		if b.Kind() == k {
			return b
		}
	}
	return nil
}

// PID returns the manager actor's PID (nil before Start).
func (m *Manager) PID() *protoactor.PID {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pid
}

// ID returns the manager's random id.
func (m *Manager) ID() uint64 { return m.id }

// Backend returns the manager's preferred backend (after Start).
func (m *Manager) Backend() backend.Backend {
	if m.rdma != nil {
		return m.rdma
	}
	return m.tcp
}

// TCP returns the manager's TCP backend.
func (m *Manager) TCP() *tcp.Backend { return m.tcp }

// Client returns a typed client bound to this manager, able to hand out
// queue pairs.
func (m *Manager) Client() *Client {
	c := NewClient(m.sys, m.PID())
	c.local = m
	c.timeout = m.cfg.RequestTimeout
	c.maxMsg = m.cfg.MaxMessageSize
	return c
}

// Bytes returns the memory of a buffer this manager owns, for filling and
// reading it between transfers. The slice is invalid once the buffer is
// released.
func (m *Manager) Bytes(b buffer.Buffer) ([]byte, error) { return m.reg.Bytes(b) }

// Register registers the caller's memory in place (pinned until released).
func (m *Manager) Register(p []byte, access buffer.Access) (buffer.Buffer, error) {
	return m.reg.Register(p, access)
}

// Release releases a buffer of this manager, waiting for in-flight work.
func (m *Manager) Release(ctx context.Context, b buffer.Buffer) error {
	return m.reg.Release(ctx, b)
}

// Close stops the actor, closes routes and the backend, releases every
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
	m.routes = make(map[string]*routeEntry)
	m.qps = make(map[uint64]*qpEntry)
	m.mu.Unlock()
	if pid != nil {
		// Poison, not Stop: the actor first answers the requests already in
		// its mailbox (with CLOSED, see refuseClosed); protoactor would drop
		// them silently on Stop and their senders would wait for a timeout.
		_ = m.sys.Root.PoisonFuture(pid).Wait()
	}
	m.wg.Wait()
	for _, e := range routes {
		<-e.ready
		if e.route != nil {
			e.route.Close()
		}
	}
	m.stopOps()
	err := m.closeBackends()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if rerr := m.reg.Close(ctx); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

func peerKey(p *protoactor.PID) string { return p.Address + "/" + p.Id }

// getRoute returns the live route to peer, setting one up if needed. Callers
// for the same peer share one setup.
func (m *Manager) getRoute(ctx context.Context, peer *protoactor.PID) (*routeEntry, error) {
	key := peerKey(peer)
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, ErrClosed
		}
		e := m.routes[key]
		if e != nil {
			select {
			case <-e.ready:
				if e.err != nil || routeDead(e.route) {
					delete(m.routes, key)
					if r := e.route; r != nil {
						m.wg.Add(1)
						go func() { defer m.wg.Done(); r.Close() }() // its queue pairs fail with the route's error
					}
					e = nil
				}
			default:
			}
		}
		if e == nil {
			if len(m.routes) >= m.cfg.MaxRoutes {
				m.mu.Unlock()
				return nil, fmt.Errorf("%d routes, the most allowed (serve --max-routes): %w", len(m.routes), backend.ErrLimit)
			}
			e = &routeEntry{key: key, peer: peer, ready: make(chan struct{})}
			m.routes[key] = e
			m.wg.Add(1)
			go m.setupRoute(e)
		}
		e.refs++
		m.mu.Unlock()

		select {
		case <-e.ready:
		case <-ctx.Done():
			m.dropRef(e)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The peer did not complete the route in time: to the
				// caller it is unreachable, whichever timer fired first
				// (this one or the setup's own RouteTimeout).
				return nil, fmt.Errorf("route to %s: no answer in time: %w: %w", key, ErrUnknownPeer, ctx.Err())
			}
			return nil, fmt.Errorf("route to %s: %w", key, ctx.Err())
		}
		if e.err != nil {
			m.dropRef(e)
			return nil, e.err
		}
		return e, nil
	}
}

func routeDead(r backend.Route) bool {
	if r == nil {
		return true
	}
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// setupRoute runs the handshake with the peer manager and connects the
// backend route.
func (m *Manager) setupRoute(e *routeEntry) {
	defer m.wg.Done()
	defer close(e.ready)
	ctx, cancel := context.WithTimeout(m.life, m.cfg.RouteTimeout)
	defer cancel()
	var errs []error
	for _, b := range m.backends {
		r, peerID, err := m.handshake(ctx, e, b)
		if err == nil {
			e.route, e.peerID, e.kind, e.since = r, peerID, b.Kind(), time.Now()
			m.routeUp(e)
			return
		}
		errs = append(errs, err)
		if !errors.Is(err, backend.ErrNotSupported) {
			break // only a peer without this backend makes us try the next
		}
	}
	e.err = errors.Join(errs...)
	m.cfg.Metrics.routeSetup("out", "", e.err)
}

// handshake sets up a route to e's peer over b.
func (m *Manager) handshake(ctx context.Context, e *routeEntry, b backend.Backend) (backend.Route, uint64, error) {
	pr, info, err := b.PrepareRoute(ctx, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("prepare %s route to %s: %w", b.Kind(), e.key, err)
	}
	fail := func(err error) (backend.Route, uint64, error) {
		pr.Abort()
		return nil, 0, err
	}
	// A message sent to a peer in the instant it dies (before protoactor
	// notices) is lost without a trace, so the handshake is retried in
	// short attempts, each with a fresh nonce, within the route timeout.
	if err := CheckReply(m.sys.Address(), e.peer.Address); err != nil {
		return fail(fmt.Errorf("handshake with %s: %w", e.key, err))
	}
	var hs *rdmapb.RouteHandshake
	var res any
	for {
		hs = &rdmapb.RouteHandshake{
			Version:       ProtocolVersion,
			InitiatorId:   m.id,
			InitiatorAddr: m.sys.Address(),
			Backend:       string(b.Kind()),
			Endpoint:      info,
			Nonce:         backend.Nonce(),
		}
		hs.Mac = handshakeMAC(m.cfg.Secret, hs)
		attempt := handshakeAttempt
		if dl, ok := ctx.Deadline(); ok {
			attempt = min(attempt, time.Until(dl))
		}
		if attempt <= 0 {
			return fail(fmt.Errorf("handshake with %s: %w: %w", e.key, ErrUnknownPeer, context.DeadlineExceeded))
		}
		var err error
		res, err = m.sys.Root.RequestFuture(e.peer, hs, attempt).Result()
		if err == nil {
			break
		}
		if !errors.Is(err, protoactor.ErrTimeout) || ctx.Err() != nil {
			return fail(fmt.Errorf("handshake with %s: %w: %w", e.key, ErrUnknownPeer, err))
		}
	}
	resp, ok := res.(*rdmapb.RouteHandshakeResponse)
	if !ok {
		// Not an answer from a manager that can take routes (a closing
		// manager, another kind of actor): to the caller the peer is
		// unreachable. The peer's own error is kept as text only, so that
		// its CLOSED is not taken for ours.
		if er, ok := res.(*rdmapb.ErrorReply); ok {
			return fail(fmt.Errorf("handshake with %s: %w: %v", e.key, ErrUnknownPeer, toError(er.Error)))
		}
		return fail(fmt.Errorf("handshake with %s: reply %T: %w: %w", e.key, res, ErrUnknownPeer, ErrBadResponse))
	}
	if !m.cfg.Secret.Verify(resp.Mac, labelReply, hs.Nonce, u64(uint64(resp.Version)), u64(resp.ResponderId),
		[]byte(resp.Backend), resp.Endpoint, u64(uint64(codeOf(resp.Error)))) {
		m.authFailures.Add(1)
		m.log.Warn("route reply failed authentication", "peer", e.key)
		return fail(fmt.Errorf("handshake reply from %s: %w", e.key, backend.ErrUnauthenticated))
	}
	if err := toError(resp.Error); err != nil {
		return fail(fmt.Errorf("%s handshake with %s: %w", b.Kind(), e.key, err))
	}
	if resp.Version != ProtocolVersion {
		return fail(fmt.Errorf("handshake with %s: peer version %d, ours %d: %w", e.key, resp.Version, ProtocolVersion, backend.ErrVersion))
	}
	if resp.ResponderId == 0 || resp.Backend != string(b.Kind()) {
		return fail(fmt.Errorf("handshake with %s: responder id %x backend %q: %w", e.key, resp.ResponderId, resp.Backend, backend.ErrProtocol))
	}
	r, err := pr.Complete(ctx, resp.Endpoint)
	if err != nil {
		return nil, 0, fmt.Errorf("connect %s route to %s: %w", b.Kind(), e.key, err)
	}
	return r, resp.ResponderId, nil
}

// dropRef releases one reference to e; the last one closes the route.
func (m *Manager) dropRef(e *routeEntry) {
	m.mu.Lock()
	e.refs--
	last := e.refs == 0
	if last && m.routes[e.key] == e {
		delete(m.routes, e.key)
	}
	m.mu.Unlock()
	if last {
		select {
		case <-e.ready:
			if e.route != nil {
				e.route.Close()
			}
		default:
			// Setup still running: whoever finds it done closes it; the
			// entry is already unreachable, so close after it ends.
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				<-e.ready
				if e.route != nil {
					e.route.Close()
				}
			}()
		}
	}
}

// newQueuePair makes a queue pair on a fresh reference to e.
func (m *Manager) newQueuePair(e *routeEntry) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	m.nextQP++
	id := m.nextQP
	qe := &qpEntry{route: e, made: time.Now()}
	qe.qp = queuepair.New(id, e.peerID, e.route, m.reg, qpbind.Options{
		Timeout:   m.cfg.OpTimeout,
		Kind:      e.kind,
		OnRelease: func() { m.releaseQP(id) },
		Observer:  m.observer(),
	})
	m.qps[id] = qe
	return id, nil
}

// takeQueuePair hands the queue pair id to the local caller, once.
func (m *Manager) takeQueuePair(id uint64) (*queuepair.QueuePair, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	qe := m.qps[id]
	if qe == nil || qe.taken {
		return nil, fmt.Errorf("queue pair %d: %w", id, queuepair.ErrReleased)
	}
	qe.taken = true
	return qe.qp, nil
}

// releaseQP drops the queue pair and its route reference.
func (m *Manager) releaseQP(id uint64) error {
	m.mu.Lock()
	qe := m.qps[id]
	delete(m.qps, id)
	m.mu.Unlock()
	if qe == nil {
		return fmt.Errorf("queue pair %d: %w", id, queuepair.ErrReleased)
	}
	m.dropRef(qe.route)
	return nil
}

// reaper releases buffers whose lease ran out.
func (m *Manager) reaper() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.dropUnclaimed(time.Now().Add(-2 * m.cfg.RequestTimeout))
		for _, r := range m.reg.Expired() {
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.OpTimeout)
			err := m.reg.Release(ctx, m.reg.Handle(r))
			cancel()
			m.forgetRemote(r.ID())
			m.log.Info("lease expired: buffer released", "region", r.ID(), "err", err)
		}
	}
}

// dropUnclaimed releases queue pairs built for a caller that never took
// them (its context ended before the reply arrived) and made before
// cutoff, so they do not hold their route for ever.
func (m *Manager) dropUnclaimed(cutoff time.Time) {
	var ids []uint64
	m.mu.Lock()
	for id, qe := range m.qps {
		if !qe.taken && qe.made.Before(cutoff) {
			ids = append(ids, id)
		}
	}
	m.mu.Unlock()
	for _, id := range ids {
		if m.releaseQP(id) == nil {
			m.log.Info("queue pair never claimed: released", "qp", id)
		}
	}
}

// maxStatusBuffers bounds the buffers a status reply lists (the reply
// stays far below the message limit; buffers_total has the count).
const maxStatusBuffers = 1024

// status builds the status reply.
func (m *Manager) status() *rdmapb.StatusResponse {
	st := m.reg.Stats()
	var sv backend.ServedStats
	for _, b := range m.backends {
		x := b.Served()
		sv.Ops += x.Ops
		sv.BytesIn += x.BytesIn
		sv.BytesOut += x.BytesOut
		sv.Rejected += x.Rejected
		sv.AuthFail += x.AuthFail
	}
	resp := &rdmapb.StatusResponse{
		ManagerId:       m.id,
		Address:         m.sys.Address(),
		Backend:         m.kinds(),
		DataAddr:        m.tcp.Addr(),
		RegisteredBytes: st.Bytes,
		ServedOps:       sv.Ops,
		ServedBytesIn:   sv.BytesIn,
		ServedBytesOut:  sv.BytesOut,
		RejectedOps:     sv.Rejected,
		AuthFailures:    sv.AuthFail + m.authFailures.Load(),

		Refusals:           m.book.snapshot(),
		Goroutines:         uint64(runtime.NumGoroutine()),
		MaxRegisteredBytes: m.cfg.Limits.MaxBytes,
		MaxRemoteBytes:     m.cfg.MaxRemoteBytes,
	}
	regions := m.reg.Regions()
	resp.BuffersTotal = uint64(len(regions))
	if len(regions) > maxStatusBuffers {
		regions = regions[:maxStatusBuffers]
	}
	for _, r := range regions {
		resp.Buffers = append(resp.Buffers, &rdmapb.BufferStatus{
			Region: r.ID(), Length: uint64(r.Len()), Access: uint32(r.Access()), UserMemory: r.Kind() == memreg.KindUser,
		})
	}
	m.mu.Lock()
	resp.RemoteBytes = m.remoteTotal
	entries := make([]*routeEntry, 0, len(m.routes))
	refs := make([]int, 0, len(m.routes))
	for _, e := range m.routes {
		entries = append(entries, e)
		refs = append(refs, e.refs)
	}
	m.mu.Unlock()
	for i, e := range entries {
		rs := &rdmapb.RouteStatus{PeerAddr: e.key, Refs: uint32(refs[i])}
		select {
		case <-e.ready:
			switch {
			case e.err != nil:
				rs.State = "failed: " + e.err.Error()
			case routeDead(e.route):
				rs.State = "down: " + fmt.Sprint(e.route.Err())
			default:
				rs.State = "up"
			}
			if e.route != nil {
				s := e.route.Stats()
				rs.Backend = string(e.kind)
				rs.PeerId, rs.Ops, rs.BytesPut, rs.BytesGot, rs.Errors = e.peerID, s.Ops, s.BytesPut, s.BytesGot, s.Errors
				rs.AgeMs = uint64(time.Since(e.since).Milliseconds())
			}
		default:
			rs.State = "connecting"
		}
		resp.Routes = append(resp.Routes, rs)
	}
	m.statusOps(resp)
	return resp
}

// managerActor is the actor; its state lives in the Manager.
type managerActor struct{ m *Manager }

func (a *managerActor) Receive(ctx protoactor.Context) {
	m := a.m
	if m.refuseClosed(ctx) {
		return
	}
	switch msg := ctx.Message().(type) {
	case *protoactor.Started, *protoactor.Stopping, *protoactor.Stopped, *protoactor.Restarting:
	case *rdmapb.Ping:
		ctx.Respond(&rdmapb.Pong{ManagerId: m.id})
	case *rdmapb.RequestBuffer:
		b, err := m.allocate(msg, isRemote(ctx), remotePeer(ctx))
		if err != nil {
			if errors.Is(err, buffer.ErrExhausted) {
				m.book.refuse(RefusedLimit, "request_buffer refused", "size", msg.Size, "remote", isRemote(ctx), "peer", remotePeer(ctx), "err", err)
			}
			ctx.Respond(&rdmapb.RequestBufferResponse{Error: fromError(err)})
			return
		}
		ctx.Respond(&rdmapb.RequestBufferResponse{Buffer: b.Proto()})
	case *rdmapb.ReleaseBuffer:
		remote := isRemote(ctx)
		b, err := buffer.FromProto(msg.Buffer)
		if err == nil && b.OwnerID != m.id {
			err = fmt.Errorf("buffer owned by %016x: %w", b.OwnerID, buffer.ErrReleased)
		}
		if err != nil {
			ctx.Respond(&rdmapb.ReleaseBufferResponse{Error: fromErrorFor(remote, err)})
			return
		}
		// Release waits for in-flight work: do it off the mailbox.
		sender := ctx.Sender()
		m.goReply(sender, func() any {
			rctx, cancel := context.WithTimeout(context.Background(), m.cfg.OpTimeout)
			defer cancel()
			err := m.reg.Release(rctx, b)
			if err == nil {
				m.forgetRemote(b.Region)
			}
			return &rdmapb.ReleaseBufferResponse{Error: fromErrorFor(remote, err)}
		})
	case *rdmapb.RenewLease:
		remote := isRemote(ctx)
		b, err := buffer.FromProto(msg.Buffer)
		d := min(time.Duration(msg.LeaseMs)*time.Millisecond, m.cfg.MaxLease)
		if err == nil && msg.LeaseMs == 0 {
			err = fmt.Errorf("renew with a lease of 0 ms: %w", buffer.ErrInvalid)
		}
		if err == nil {
			err = m.reg.SetLease(b, d)
		}
		if err != nil {
			ctx.Respond(&rdmapb.RenewLeaseResponse{Error: fromErrorFor(remote, err)})
			return
		}
		ctx.Respond(&rdmapb.RenewLeaseResponse{LeaseMs: uint64(d / time.Millisecond)})
	case *rdmapb.RevokeBuffer:
		remote := isRemote(ctx)
		b, err := buffer.FromProto(msg.Buffer)
		if err != nil {
			ctx.Respond(&rdmapb.RevokeBufferResponse{Error: fromErrorFor(remote, err)})
			return
		}
		m.goReply(ctx.Sender(), func() any {
			rctx, cancel := context.WithTimeout(context.Background(), m.cfg.OpTimeout)
			defer cancel()
			return &rdmapb.RevokeBufferResponse{Error: fromErrorFor(remote, m.reg.Revoke(rctx, b))}
		})
	case *rdmapb.RequestQueuePair:
		// Locality comes from how the request arrived (remote_origin.go),
		// never from its sender address: a remote peer must not make us
		// set up routes to addresses it names.
		if isRemote(ctx) || ctx.Sender() == nil {
			m.book.refuse(RefusedNotLocal, "request_queue_pair from a remote peer refused", "peer", remotePeer(ctx))
			ctx.Respond(&rdmapb.RequestQueuePairResponse{Error: fromError(fmt.Errorf("queue pairs are handed only to callers in the manager's process: %w", ErrNotLocal))})
			return
		}
		if msg.Peer == nil || msg.Peer.Address == "" || msg.Peer.Id == "" {
			ctx.Respond(&rdmapb.RequestQueuePairResponse{Error: fromError(fmt.Errorf("request_queue_pair without peer: %w", buffer.ErrInvalid))})
			return
		}
		peer := protoactor.NewPID(msg.Peer.Address, msg.Peer.Id)
		timeout := m.cfg.RouteTimeout
		if msg.TimeoutMs > 0 && time.Duration(msg.TimeoutMs)*time.Millisecond < timeout {
			timeout = time.Duration(msg.TimeoutMs) * time.Millisecond
		}
		m.goReply(ctx.Sender(), func() any {
			rctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			e, err := m.getRoute(rctx, peer)
			if err != nil {
				return &rdmapb.RequestQueuePairResponse{Error: fromError(err)}
			}
			id, err := m.newQueuePair(e)
			if err != nil {
				m.dropRef(e)
				return &rdmapb.RequestQueuePairResponse{Error: fromError(err)}
			}
			return &rdmapb.RequestQueuePairResponse{QpId: id, PeerId: e.peerID, Backend: string(e.kind)}
		})
	case *rdmapb.ReleaseQueuePair:
		ctx.Respond(&rdmapb.ReleaseQueuePairResponse{Error: fromError(m.releaseQP(msg.QpId))})
	case *rdmapb.RouteHandshake:
		if isRemote(ctx) && !m.handshakeAllowed(remotePeer(ctx)) {
			m.book.refuse(RefusedHandshake, "route handshake over the per-peer rate refused", "peer", remotePeer(ctx))
			resp := &rdmapb.RouteHandshakeResponse{Version: ProtocolVersion, ResponderId: m.id, Backend: msg.Backend,
				Error: fromError(fmt.Errorf("more than %d route handshakes in %v (serve --handshakes-per-peer): %w", m.cfg.HandshakesPerPeer, handshakeWindow, backend.ErrLimit))}
			resp.Mac = replyMAC(m.cfg.Secret, msg.Nonce, resp)
			ctx.Respond(resp)
			return
		}
		ctx.Respond(m.acceptRoute(msg))
	case *rdmapb.StatusRequest:
		ctx.Respond(m.status())
	default:
		m.book.refuse(RefusedUnknownType, "unknown message", "type", fmt.Sprintf("%T", msg), "sender", PIDString(ctx.Sender()))
		if ctx.Sender() != nil {
			ctx.Respond(&rdmapb.ErrorReply{Error: fromError(fmt.Errorf("message %T: %w", msg, ErrUnknownMessage))})
		}
	}
}

func (m *Manager) acceptRoute(hs *rdmapb.RouteHandshake) *rdmapb.RouteHandshakeResponse {
	resp := &rdmapb.RouteHandshakeResponse{Version: ProtocolVersion, ResponderId: m.id, Backend: hs.Backend}
	b := m.backendOf(backend.Kind(hs.Backend))
	defer func() { resp.Mac = replyMAC(m.cfg.Secret, hs.Nonce, resp) }()
	if err := m.checkHandshake(hs); err != nil {
		m.authFailures.Add(1)
		m.book.refuse(RefusedHandshake, "route handshake refused", "initiator", hs.InitiatorAddr, "err", err)
		resp.Error = fromError(err)
		return resp
	}
	switch {
	case hs.Version != ProtocolVersion:
		resp.Error = fromError(fmt.Errorf("handshake version %d, ours %d: %w", hs.Version, ProtocolVersion, backend.ErrVersion))
	case b == nil:
		resp.Error = fromError(fmt.Errorf("handshake for backend %q, ours %s: %w", hs.Backend, m.kinds(), backend.ErrNotSupported))
	case hs.InitiatorId == 0:
		resp.Error = fromError(fmt.Errorf("handshake without initiator id: %w", buffer.ErrInvalid))
	default:
		ctx, cancel := context.WithTimeout(context.Background(), m.cfg.RouteTimeout)
		defer cancel()
		info, err := b.AcceptRoute(ctx, hs.InitiatorId, hs.Endpoint)
		if err != nil {
			resp.Error = fromError(err)
		} else {
			resp.Endpoint = info
			m.inboundUp(hs)
		}
	}
	if resp.Error != nil {
		m.book.refuse(RefusedHandshake, "route handshake refused", "initiator", hs.InitiatorAddr, "err", resp.Error.Message)
	}
	return resp
}

// checkHandshake authenticates a handshake and refuses replays.
func (m *Manager) checkHandshake(hs *rdmapb.RouteHandshake) error {
	if !m.cfg.Secret.Enabled() {
		return nil
	}
	if len(hs.Nonce) != backend.NonceSize {
		return fmt.Errorf("handshake nonce of %d bytes: %w", len(hs.Nonce), backend.ErrUnauthenticated)
	}
	if !m.cfg.Secret.Verify(hs.Mac, labelHandshake, u64(uint64(hs.Version)), u64(hs.InitiatorId), []byte(hs.InitiatorAddr),
		[]byte(hs.Backend), hs.Endpoint, hs.Nonce) {
		return fmt.Errorf("handshake MAC does not verify: %w", backend.ErrUnauthenticated)
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, seen := m.nonces[string(hs.Nonce)]; seen {
		return fmt.Errorf("replayed handshake: %w", backend.ErrUnauthenticated)
	}
	if len(m.nonces) >= maxNonces {
		for n, exp := range m.nonces {
			if now.After(exp) {
				delete(m.nonces, n)
			}
		}
		if len(m.nonces) >= maxNonces {
			return fmt.Errorf("%d handshakes in flight: %w", len(m.nonces), backend.ErrLimit)
		}
	}
	m.nonces[string(hs.Nonce)] = now.Add(replayWindow)
	return nil
}

// replayWindow is how long a handshake nonce is remembered. A replay after
// it gains nothing: the tokens it yields are useless without the secret,
// which every data connection proves against a fresh server nonce.
const replayWindow = 10 * time.Minute

func codeOf(e *rdmapb.Error) rdmapb.Code {
	if e == nil {
		return rdmapb.Code_OK
	}
	return e.Code
}

// refuseClosed answers a request that reaches a closed manager with CLOSED
// and reports whether it did.
func (m *Manager) refuseClosed(ctx protoactor.Context) bool {
	select {
	case <-m.stop:
	default:
		return false
	}
	switch ctx.Message().(type) {
	case *protoactor.Started, *protoactor.Stopping, *protoactor.Stopped, *protoactor.Restarting:
		return false
	}
	if ctx.Sender() != nil {
		ctx.Respond(&rdmapb.ErrorReply{Error: fromError(fmt.Errorf("manager %016x: %w", m.id, ErrClosed))})
	}
	return true
}

// goReply computes a reply off the mailbox and sends it to sender.
func (m *Manager) goReply(sender *protoactor.PID, f func() any) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		r := f()
		if sender != nil {
			m.sys.Root.Send(sender, r)
		}
	}()
}
