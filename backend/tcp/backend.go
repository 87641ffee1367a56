package tcp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Backend is the TCP data plane of one manager.
type Backend struct {
	cfg Config
	reg *buffer.Registry
	log *slog.Logger

	served struct {
		ops, bytesIn, bytesOut, rejected, authFail atomic.Uint64
	}

	mu sync.Mutex // guards the fields below
	// ln is the data listener, set by Start.
	ln     net.Listener
	addr   string
	tokens map[[tokenSize]byte]tokenEntry
	conns  map[net.Conn]struct{} // server and client connections, closed by Close
	routes map[*route]struct{}
	closed bool

	wg sync.WaitGroup // accept loop, server connections, routes' goroutines
}

type tokenEntry struct {
	peer    uint64
	expires time.Time
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend serving reg's regions. It does no I/O.
func New(cfg Config, reg *buffer.Registry, log *slog.Logger) (*Backend, error) {
	if err := cfg.Verify(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Backend{
		cfg:    cfg.withDefaults(),
		reg:    reg,
		log:    log.With("backend", "tcp"),
		tokens: make(map[[tokenSize]byte]tokenEntry),
		conns:  make(map[net.Conn]struct{}),
		routes: make(map[*route]struct{}),
	}, nil
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
	ln = b.wrapListener(ln)
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
		b.addr = advertise(ln.Addr().(*net.TCPAddr), b.cfg.AdvertiseHost)
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go b.acceptLoop(ln)
	b.log.Info("data listener up", "addr", b.addr)
	return nil
}

// advertise turns a listen address into a dialable one: host with a's
// port when host is set, else a (loopback for a wildcard).
func advertise(a *net.TCPAddr, host string) string {
	if host != "" {
		return net.JoinHostPort(host, fmt.Sprint(a.Port))
	}
	if a.IP == nil || a.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(a.Port))
	}
	return a.String()
}

// Addr returns the advertised data address ("" before Start).
func (b *Backend) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
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

func (b *Backend) acceptLoop(ln net.Listener) {
	defer b.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		b.mu.Lock()
		if b.closed || len(b.conns) >= b.cfg.MaxServerConns {
			b.mu.Unlock()
			c.Close()
			continue
		}
		b.conns[c] = struct{}{}
		b.wg.Add(1)
		b.mu.Unlock()
		go b.serveConn(c)
	}
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

// takeToken consumes a token; single use.
func (b *Backend) takeToken(t [tokenSize]byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.tokens[t]
	if !ok {
		return false
	}
	delete(b.tokens, t)
	return time.Now().Before(e.expires)
}

// serveConn authenticates a data connection and serves its requests in
// order until it fails. It returns when the connection is closed.
func (b *Backend) serveConn(c net.Conn) {
	defer b.wg.Done()
	defer b.untrackConn(c)
	defer c.Close()
	log := b.log.With("remote", c.RemoteAddr().String())

	_ = c.SetDeadline(time.Now().Add(b.cfg.HelloTimeout))
	var nonce [16]byte
	copy(nonce[:], backend.Nonce())
	var ch [challengeSize]byte
	encodeChallenge(ch[:], nonce)
	if _, err := c.Write(ch[:]); err != nil {
		return
	}
	var hello [helloSize]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		b.served.authFail.Add(1)
		log.Warn("data connection without hello", "err", err)
		return
	}
	var ack [helloAckSize]byte
	tok, mac, err := decodeHello(hello[:])
	if err == nil && b.cfg.Secret.Enabled() {
		want := helloMAC(b.cfg.Secret, nonce, tok)
		if !hmac.Equal(mac[:], want[:]) {
			err = fmt.Errorf("hello does not prove the secret: %w", backend.ErrUnauthenticated)
		}
	}
	if err == nil && !b.takeToken(tok) {
		err = fmt.Errorf("unknown, used or expired token: %w", backend.ErrUnauthenticated)
	}
	if err != nil {
		b.served.authFail.Add(1)
		log.Warn("data connection refused", "err", err)
		encodeHelloAck(ack[:], byte(backend.Code(err)))
		_, _ = c.Write(ack[:])
		return
	}
	encodeHelloAck(ack[:], 0)
	if _, err := c.Write(ack[:]); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	setSockopts(c, b.cfg.SocketBuffer)
	s := serverConn{b: b, c: c}
	if err := s.serve(); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		log.Warn("data connection closed", "err", err)
	}
}

func setSockopts(c net.Conn, bufSize int) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.SetNoDelay(true)
	if bufSize > 0 {
		_ = tc.SetReadBuffer(bufSize)
		_ = tc.SetWriteBuffer(bufSize)
	}
}

// serverConn serves one authenticated connection; used by one goroutine.
//
// Responses are batched: while more requests are already buffered, response
// headers and READ payloads (still in their regions, referenced) accumulate
// and go out in one writev when the input runs dry or the batch is full.
type serverConn struct {
	b       *Backend
	c       net.Conn
	out     []byte      // response headers of the batch
	segs    []respSeg   // the batch, in order
	payload int         // READ payload bytes in the batch
	iov     net.Buffers // the batch for writev; WriteTo consumes it
	iovBuf  net.Buffers // iov's backing array, kept across batches
}

// respSeg is one response of a batch: out[hdrEnd-respHeaderSize:hdrEnd],
// then mem (READ only) from region r, unreferenced once written.
type respSeg struct {
	hdrEnd int
	mem    []byte
	r      *buffer.Region
}

const (
	serverReadBuf   = 4 << 10
	maxBatchSegs    = 64
	maxBatchPayload = 1 << 20
)

func (s *serverConn) serve() error {
	defer s.release()
	br := newReader(s.c, serverReadBuf)
	var hdr [reqHeaderSize]byte
	var h reqHeader
	maxLen := uint32(s.b.cfg.MaxFrameLen)
	for {
		if len(s.segs) > 0 && (br.Buffered() == 0 || len(s.segs) >= maxBatchSegs || s.payload >= maxBatchPayload) {
			if err := s.flush(); err != nil {
				return err
			}
		}
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return err
		}
		if err := h.decode(hdr[:], maxLen); err != nil {
			s.b.served.rejected.Add(1)
			return err
		}
		if h.op == opPing {
			s.appendResp(respHeader{op: opPing, wrid: h.wrid}, nil, nil)
			continue
		}
		need := backend.Op(h.op).Need()
		r, mem, verr := s.b.reg.Acquire(h.region, h.key, h.offset, uint64(h.length), need)
		if verr != nil {
			s.b.served.rejected.Add(1)
			if h.op == opWrite {
				// Keep the stream in step: drop the payload, touch nothing.
				if _, err := io.CopyN(io.Discard, br, int64(h.length)); err != nil {
					return err
				}
			}
			s.appendResp(respHeader{op: h.op, code: byte(backend.Code(verr)), wrid: h.wrid}, nil, nil)
			continue
		}
		switch h.op {
		case opWrite:
			// A peer that stalls mid-payload must not hold the region
			// (and a revocation or release waiting on it) for long.
			timed := br.Buffered() < len(mem)
			if timed {
				_ = s.c.SetReadDeadline(time.Now().Add(s.b.cfg.FrameTimeout))
			}
			_, err := io.ReadFull(br, mem)
			r.UnrefRemote()
			if timed && err == nil {
				err = s.c.SetReadDeadline(time.Time{})
			}
			if err != nil {
				return err
			}
			s.b.served.ops.Add(1)
			s.b.served.bytesIn.Add(uint64(h.length))
			s.appendResp(respHeader{op: h.op, wrid: h.wrid}, nil, nil)
		case opRead:
			s.appendResp(respHeader{op: h.op, length: h.length, wrid: h.wrid}, mem, r)
		}
	}
}

func (s *serverConn) appendResp(h respHeader, mem []byte, r *buffer.Region) {
	n := len(s.out)
	s.out = append(s.out, make([]byte, respHeaderSize)...)
	h.encode(s.out[n:])
	s.segs = append(s.segs, respSeg{hdrEnd: len(s.out), mem: mem, r: r})
	s.payload += len(mem)
}

// flush writes the batch with one writev and drops the regions' references.
func (s *serverConn) flush() error {
	s.iov = s.iovBuf[:0]
	start := 0
	for _, g := range s.segs {
		if g.mem != nil {
			s.iov = append(s.iov, s.out[start:g.hdrEnd], g.mem)
			start = g.hdrEnd
		}
	}
	if start < len(s.out) {
		s.iov = append(s.iov, s.out[start:])
	}
	s.iovBuf = s.iov[:0]
	_, err := s.iov.WriteTo(s.c)
	if err == nil {
		for _, g := range s.segs {
			if g.mem != nil {
				s.b.served.ops.Add(1)
				s.b.served.bytesOut.Add(uint64(len(g.mem)))
			}
		}
	}
	s.release()
	return err
}

// release drops the references of the batch and empties it.
func (s *serverConn) release() {
	for i, g := range s.segs {
		if g.r != nil {
			g.r.UnrefRemote()
		}
		s.segs[i] = respSeg{}
	}
	s.segs = s.segs[:0]
	s.out = s.out[:0]
	s.payload = 0
	clear(s.iovBuf[:cap(s.iovBuf)])
}

// codeByte is the wire form of an error.
func codeByte(err error) byte { return byte(backend.Code(err)) }

// codeErr turns a wire code into the error the caller compares with.
func codeErr(op byte, code byte) error {
	return &backend.RemoteError{Code: rdmapb.Code(code), Op: backend.Op(op)}
}
