//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// tokenTTL is how long a route token from AcceptRoute waits for its
// connection; maxTokens bounds the tokens waiting.
const (
	tokenTTL  = time.Minute
	maxTokens = 4096
)

// Backend is the shm backend of one manager: the owner's side (a socket
// that hands out its memfds to authenticated processes of the host) and
// the initiator's (routes that map peers' memfds and copy).
type Backend struct {
	cfg  Config
	reg  *memreg.Registry
	log  *slog.Logger
	host [hostIDSize]byte
	uid  int

	authFail      atomic.Uint64
	refusedAccept atomic.Uint64 // connections refused at accept (caps, users)
	ipcOpens      atomic.Uint64 // peers' device regions opened through CUDA IPC (device.go)
	logs          logs
	inbox         atomic.Pointer[inboxRef] // SetInbox
	wg            sync.WaitGroup           // the accept loop and the connections

	mu sync.Mutex // guards the fields below
	// started and closed: Start ran; Close ran.
	started, closed bool
	ln              *net.UnixListener
	name            string // abstract socket name, without '@'
	tokens          map[[tokenSize]byte]token
	conns           map[*serverConn]struct{}
	// preAuth counts connections in their handshake, preAuthUID per user;
	// authed those authenticated, authedPeer per peer manager (admit.go).
	preAuth    int
	preAuthUID map[uint32]int
	authed     int
	authedPeer map[uint64]int
	routes     map[*route]struct{} // routes we initiated, until closed
	// gone sums the counters of connections that ended.
	gone backend.ServedStats
}

// token is a route the owner accepted and whose connection it awaits.
type token struct {
	peerID  uint64
	pid     uint32
	uid     uint32
	expires time.Time
	// agent: issued to this process's own host agent (acceptAgentRoute).
	agent bool
}

func init() { wiring.SetBackend(newSHM) }

// newSHM returns a backend serving reg; it does no I/O. Package node
// reaches it through wiring.NewBackend.
func newSHM(cfg Config, reg *memreg.Registry, log *slog.Logger) (*Backend, error) {
	if reg == nil {
		return nil, errors.New("shm: nil registry")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg.SetExporting() // its regions are exported as they lie (memreg)
	return &Backend{cfg: cfg.withDefaults(), reg: reg, log: log.With("backend", "shm"), uid: os.Getuid(),
		tokens: make(map[[tokenSize]byte]token), conns: make(map[*serverConn]struct{}),
		routes: make(map[*route]struct{}), preAuthUID: make(map[uint32]int), authedPeer: make(map[uint64]int)}, nil
}

// Kind implements backend.Backend.
func (b *Backend) Kind() backend.Kind { return backend.KindSHM }

// Start listens on a fresh abstract unix socket.
func (b *Backend) Start(ctx context.Context) error {
	host, err := hostID(b.cfg.HostID)
	if err != nil {
		return fmt.Errorf("%w: %w", err, rdmamgr.ErrNotSupported)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := "rdmamgr-shm-" + hex.EncodeToString(rnd[:])
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@" + name, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("shm: listen on @%s: %w", name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.started {
		ln.Close()
		return fmt.Errorf("shm: Start after Start or Close: %w", rdmamgr.ErrClosed)
	}
	// Processes of our user must not reach our memfds behind the socket's
	// back (/proc/PID/fd/N, /proc/PID/mem): only root may, once we are not
	// dumpable. Process-wide: no core dumps either.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		ln.Close()
		return fmt.Errorf("shm: prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	b.host, b.ln, b.name, b.started = host, ln, name, true
	b.reg.AddCutter(memreg.CutterFunc(b.cutRegion))
	b.wg.Add(1)
	go b.acceptLoop(ln)
	return nil
}

// Addr is the abstract socket's name.
func (b *Backend) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.name == "" {
		return ""
	}
	return "@" + b.name
}

// ready returns the host id once started, or why not.
func (b *Backend) ready() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return fmt.Errorf("shm: %w", rdmamgr.ErrClosed)
	case !b.started:
		return fmt.Errorf("shm: not started: %w", rdmamgr.ErrNotSupported)
	}
	return nil
}

// Served sums what every connection served.
func (b *Backend) Served() backend.ServedStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.gone
	for c := range b.conns {
		cs := c.served()
		s.Ops += cs.Ops
		s.BytesIn += cs.BytesIn
		s.BytesOut += cs.BytesOut
		s.Rejected += cs.Rejected
	}
	s.AuthFail = b.authFail.Load()
	return s
}

// ServedByPeer implements backend.PeerServer.
func (b *Backend) ServedByPeer() map[uint64]backend.PeerServedStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[uint64]backend.PeerServedStats)
	for c := range b.conns {
		c.mu.Lock() // authenticate sets peerID under it
		peer := c.peerID
		c.mu.Unlock()
		if peer == 0 {
			continue
		}
		cs, p := c.served(), out[peer]
		p.Ops += cs.Ops
		p.BytesIn += cs.BytesIn
		p.BytesOut += cs.BytesOut
		p.Rejected += cs.Rejected
		p.Conns++
		out[peer] = p
	}
	return out
}

// cutRegion is b's memreg.Cutter (Start): every connection that mapped r
// learns through its state table that r is revoked, released or has a new
// lease; the registry then waits for the copies in flight.
func (b *Backend) cutRegion(r *memreg.Region) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		c.cutRegion(r)
	}
}

// Close stops the listener, ends every connection (their regions are cut
// first, and their copies drained within a bound) and waits. Idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.wg.Wait()
		return nil
	}
	b.closed = true
	ln := b.ln
	conns := make([]*serverConn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	routes := make([]*route, 0, len(b.routes))
	for r := range b.routes {
		routes = append(routes, r)
	}
	b.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, r := range routes {
		r.Close()
	}
	for _, c := range conns {
		c.conn.Close()
	}
	b.wg.Wait()
	return nil
}

// addRoute lists r for Close; it fails when the backend is closed.
func (b *Backend) addRoute(r *route) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("shm: %w", rdmamgr.ErrClosed)
	}
	b.routes[r] = struct{}{}
	return nil
}

func (b *Backend) removeRoute(r *route) {
	b.mu.Lock()
	delete(b.routes, r)
	b.mu.Unlock()
}

// newToken records an accepted route's token.
func (b *Backend) newToken(peerID uint64, info *routeInfo, agent bool) ([tokenSize]byte, error) {
	var tok [tokenSize]byte
	_, _ = rand.Read(tok[:])
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.routesOf(peerID); n >= maxRoutesPerPeer {
		return tok, fmt.Errorf("shm: peer %016x holds %d routes and tokens, the most allowed: %w", peerID, n, rdmamgr.ErrLimit)
	}
	if len(b.tokens) >= maxTokens {
		for k, t := range b.tokens {
			if now.After(t.expires) {
				delete(b.tokens, k)
			}
		}
		if len(b.tokens) >= maxTokens {
			return tok, fmt.Errorf("shm: %d routes awaiting their connection: %w", len(b.tokens), rdmamgr.ErrLimit)
		}
	}
	b.tokens[tok] = token{peerID: peerID, pid: info.pid, uid: info.uid, expires: now.Add(tokenTTL), agent: agent}
	return tok, nil
}

// peekToken returns a live token, leaving it in place: a connection that
// fails to prove it (wrong MAC, process or user) does not use it up, so
// whoever learnt a token cannot burn the route it was issued for.
func (b *Backend) peekToken(tok [tokenSize]byte) (token, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tokens[tok]
	if ok && !time.Now().Before(t.expires) {
		delete(b.tokens, tok)
		return t, false
	}
	return t, ok
}

// takeToken uses up a token a connection proved, and takes an
// authenticated slot for its connection; false if the token went
// meanwhile or the caps are full (the error says which).
func (b *Backend) takeToken(tok [tokenSize]byte) (token, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.tokens[tok]
	if !ok {
		return t, fmt.Errorf("route token already used: %w", rdmamgr.ErrUnauthenticated)
	}
	delete(b.tokens, tok)
	if b.authed >= maxConns {
		return t, fmt.Errorf("shm: %d connections served, the most allowed: %w", b.authed, rdmamgr.ErrLimit)
	}
	b.authed++
	b.authedPeer[t.peerID]++
	return t, nil
}

// authedDone gives back an authenticated connection's slot.
func (b *Backend) authedDone(peer uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.authed--
	if n := b.authedPeer[peer] - 1; n > 0 {
		b.authedPeer[peer] = n
	} else {
		delete(b.authedPeer, peer)
	}
}

func (b *Backend) dropToken(tok [tokenSize]byte) {
	b.mu.Lock()
	delete(b.tokens, tok)
	b.mu.Unlock()
}

// uidAllowed reports whether processes of uid may map our memory.
func (b *Backend) uidAllowed(uid uint32) bool {
	if int(uid) == b.uid {
		return true
	}
	for _, u := range b.cfg.AllowUIDs {
		if u >= 0 && uint32(u) == uid {
			return true
		}
	}
	return false
}
