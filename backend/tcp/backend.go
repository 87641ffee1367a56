package tcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// Backend is the TCP data plane of one manager.
type Backend struct {
	cfg Config
	reg *memreg.Registry
	log *slog.Logger

	served struct {
		ops, bytesIn, bytesOut, rejected, authFail atomic.Uint64
	}
	lnStats struct {
		acceptRetries, refusedPending, refusedFull atomic.Uint64
		refusedPeer, connsEvicted, tokensEvicted   atomic.Uint64
	}
	logs struct {
		noHello, refused, acceptErr, closed logSampler
	}
	done chan struct{} // closed by Close: ends the accept loop's backoff
	// inbox takes the PutWithImm events and Send messages served
	// (SetInbox; nil: both are refused with ErrNoReceive).
	inbox atomic.Pointer[inboxRef]
	// resolver serves frames for attached processes (via.go; nil: not a
	// host agent, they are refused with ErrNotSupported).
	resolver atomic.Pointer[resolverRef]
	// life ends when Close starts (stop): it bounds what waits for the
	// resolver.
	life context.Context
	stop context.CancelFunc

	mu sync.Mutex // guards the fields below
	// ln is the data listener, set by Start.
	ln     net.Listener
	lnErr  error // why the accept loop ended for good; nil while it runs
	addr   string
	tokens map[[tokenSize]byte]tokenEntry
	// tokensByPeer and authByPeer count each peer's pending tokens and
	// authenticated connections, for the per-peer caps.
	tokensByPeer map[uint64]int
	authByPeer   map[uint64]int
	conns        map[net.Conn]struct{} // server and client connections, closed by Close
	routes       map[*route]struct{}
	// srv holds the served connections past the hello (for cutRegion).
	srv map[*serverConn]struct{}
	// pending counts connections accepted and not through the hello, in
	// all and per source address; authed counts those past it.
	pending     int
	pendingByIP map[netip.Addr]int
	authed      int
	closed      bool
	// peers count what was served for each peer manager (peers.go).
	peers map[uint64]*peerCounters

	wg sync.WaitGroup // accept loop, server connections, routes' goroutines

	stage stageState // pinned buffers staging device memory (stage.go)
}

var _ backend.Backend = (*Backend)(nil)

func init() { wiring.SetBackend(newTCP) }

// newTCP returns a backend serving reg's regions. It does no I/O.
// Package node reaches it through wiring.NewBackend.
func newTCP(cfg Config, reg *memreg.Registry, log *slog.Logger) (*Backend, error) {
	if err := cfg.Verify(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Backend{
		cfg:          cfg.withDefaults(),
		reg:          reg,
		log:          log.With("backend", "tcp"),
		tokens:       make(map[[tokenSize]byte]tokenEntry),
		tokensByPeer: make(map[uint64]int),
		authByPeer:   make(map[uint64]int),
		conns:        make(map[net.Conn]struct{}),
		routes:       make(map[*route]struct{}),
		srv:          make(map[*serverConn]struct{}),
		pendingByIP:  make(map[netip.Addr]int),
		done:         make(chan struct{}),
	}
	b.life, b.stop = context.WithCancel(context.Background())
	if reg != nil {
		reg.AddCutter(memreg.CutterFunc(b.cutRegion))
	}
	return b, nil
}

// Kind returns backend.KindTCP.
func (b *Backend) Kind() backend.Kind { return backend.KindTCP }

// Start opens the data listener and its accept loop.
func (b *Backend) Start(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", b.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("tcp: listen %s: %w", b.cfg.ListenAddr, err)
	}
	return b.serve(b.wrapListener(ln)) // tls.go
}

// serve starts the accept loop on ln (Start's listener, or a test's).
func (b *Backend) serve(ln net.Listener) error {
	b.mu.Lock()
	if b.closed || b.ln != nil {
		b.mu.Unlock()
		ln.Close()
		if b.closed {
			return rdmamgr.ErrClosed
		}
		return errors.New("tcp: already started")
	}
	b.ln = ln
	b.addr = b.cfg.AdvertiseAddr
	if b.addr == "" {
		b.addr = advertise(ln.Addr(), b.cfg.AdvertiseHost)
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go b.acceptLoop(ln)
	b.log.Info("data listener up", "addr", b.addr)
	return nil
}

// advertise turns a listen address into a dialable one: host with the
// listener's port when host is set, else the address (loopback for a
// wildcard).
func advertise(addr net.Addr, host string) string {
	a, ok := addr.(*net.TCPAddr)
	if !ok {
		return addr.String()
	}
	if host != "" {
		return net.JoinHostPort(host, fmt.Sprint(a.Port))
	}
	if a.IP == nil || a.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(a.Port))
	}
	return a.String()
}

// Addr returns the advertised data address ("" before Start). Once the
// listener is down for good it says so: "HOST:PORT (listener down: ERR)".
func (b *Backend) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lnErr != nil {
		return fmt.Sprintf("%s (listener down: %v)", b.addr, b.lnErr)
	}
	return b.addr
}

// Served returns counters of requests served for peers.
func (b *Backend) Served() backend.ServedStats {
	return backend.ServedStats{
		Ops:      b.served.ops.Load(),
		BytesIn:  b.served.bytesIn.Load(),
		BytesOut: b.served.bytesOut.Load(),
		Rejected: b.served.rejected.Load(),
		AuthFail: b.served.authFail.Load(),
	}
}

// Close closes the listener, every connection and route, and waits for
// every goroutine. Idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.wg.Wait()
		return nil
	}
	b.closed = true
	close(b.done)
	b.stop()
	if b.ln != nil {
		b.ln.Close()
	}
	for c := range b.conns {
		c.Close()
	}
	routes := make([]*route, 0, len(b.routes))
	for r := range b.routes {
		routes = append(routes, r)
	}
	b.mu.Unlock()
	for _, r := range routes {
		r.Close()
	}
	b.wg.Wait()
	b.stage.close()
	return nil
}

func (b *Backend) untrackConn(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
}
