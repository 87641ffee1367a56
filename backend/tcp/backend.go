package tcp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
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
	}
	logs struct {
		noHello, refused, acceptErr, closed logSampler
	}
	done chan struct{} // closed by Close: ends the accept loop's backoff

	mu sync.Mutex // guards the fields below
	// ln is the data listener, set by Start.
	ln     net.Listener
	lnErr  error // why the accept loop ended for good; nil while it runs
	addr   string
	tokens map[[tokenSize]byte]tokenEntry
	conns  map[net.Conn]struct{} // server and client connections, closed by Close
	routes map[*route]struct{}
	// srv holds the served connections past the hello (for CutRegion).
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
}

type tokenEntry struct {
	peer    uint64
	expires time.Time
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend serving reg's regions. It does no I/O.
func New(cfg Config, reg *memreg.Registry, log *slog.Logger) (*Backend, error) {
	if err := cfg.Verify(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Backend{
		cfg:         cfg.withDefaults(),
		reg:         reg,
		log:         log.With("backend", "tcp"),
		tokens:      make(map[[tokenSize]byte]tokenEntry),
		conns:       make(map[net.Conn]struct{}),
		routes:      make(map[*route]struct{}),
		srv:         make(map[*serverConn]struct{}),
		pendingByIP: make(map[netip.Addr]int),
		done:        make(chan struct{}),
	}
	if reg != nil {
		reg.AddCutter(b)
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
			return backend.ErrClosed
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
	return nil
}

// trackConn registers c for Close; it fails if the backend is closed.
func (b *Backend) trackConn(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *Backend) untrackConn(c net.Conn) {
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
}

// PrepareRoute returns the initiator's info: version and connection count.
func (b *Backend) PrepareRoute(ctx context.Context, peerID uint64) (backend.PendingRoute, []byte, error) {
	b.mu.Lock()
	started, closed := b.ln != nil, b.closed
	b.mu.Unlock()
	if closed {
		return nil, nil, backend.ErrClosed
	}
	if !started {
		return nil, nil, ErrNotStarted
	}
	return &pendingRoute{b: b, peer: peerID}, encodeInitiatorInfo(b.cfg.ConnsPerRoute), nil
}

// AcceptRoute hands the initiator our data address and single-use tokens.
func (b *Backend) AcceptRoute(ctx context.Context, peerID uint64, info []byte) ([]byte, error) {
	n, err := decodeInitiatorInfo(info)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, backend.ErrClosed
	}
	if b.ln == nil {
		return nil, ErrNotStarted
	}
	if b.lnErr != nil {
		return nil, fmt.Errorf("%w: %w", ErrListenerDown, b.lnErr)
	}
	for t, e := range b.tokens {
		if now.After(e.expires) {
			delete(b.tokens, t)
		}
	}
	if len(b.tokens)+n > b.cfg.MaxPendingTokens {
		return nil, fmt.Errorf("tcp: %d route tokens pending: %w", len(b.tokens), backend.ErrLimit)
	}
	tokens := make([][tokenSize]byte, n)
	for i := range tokens {
		if _, err := rand.Read(tokens[i][:]); err != nil {
			return nil, fmt.Errorf("tcp: token: %w", err)
		}
		b.tokens[tokens[i]] = tokenEntry{peer: peerID, expires: now.Add(b.cfg.TokenTTL)}
	}
	return encodeResponderInfo(b.addr, tokens), nil
}

// takeToken consumes a token (single use) and returns the peer it was
// issued to.
func (b *Backend) takeToken(t [tokenSize]byte) (uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.tokens[t]
	if !ok {
		return 0, false
	}
	delete(b.tokens, t)
	return e.peer, time.Now().Before(e.expires)
}

// codeByte is the wire form of an error.
func codeByte(err error) byte { return byte(backend.Code(err)) }

// codeErr turns a wire code into the error the caller compares with.
func codeErr(op byte, code byte) error {
	return &backend.RemoteError{Code: rdmapb.Code(code), Op: backend.Op(op)}
}
