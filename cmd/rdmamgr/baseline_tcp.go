package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// The plain-TCP baseline: what the same machine does with nothing but Go's
// net package between two processes. `rdmamgr bench baseline-server` is the
// server; the clients below run inside `rdmamgr bench --baseline`.
//
// Every exchange on a connection starts with a fixed 24-byte header from
// the client:
//
//	[0:4]   magic "rdbl"
//	[4]     mode (blModePut, blModeGet, blModeRR)
//	[5:8]   zero
//	[8:16]  size, bytes per operation (little endian)
//	[16:24] count, operations
//
// blModePut: the client writes count×size bytes, the server io.ReadFull's
// each size bytes into one reused buffer and answers with 1 byte at the end.
// blModeGet: the server writes count×size bytes from one buffer, the client
// reads them. blModeRR: count requests of size bytes, each answered with
// size bytes (ping-pong with one in flight, a pipeline with many). After an
// exchange the connection takes the next header.

const (
	blMagic   = "rdbl"
	blHdrLen  = 24
	blModePut = 1
	blModeGet = 2
	blModeRR  = 3

	blMaxSize  = 1 << 30
	blMaxCount = 1 << 40
)

type blHeader struct {
	mode  byte
	size  uint64
	count uint64
}

func (h blHeader) encode() []byte {
	b := make([]byte, blHdrLen)
	copy(b, blMagic)
	b[4] = h.mode
	binary.LittleEndian.PutUint64(b[8:], h.size)
	binary.LittleEndian.PutUint64(b[16:], h.count)
	return b
}

func decodeBLHeader(b []byte) (blHeader, error) {
	h := blHeader{mode: b[4], size: binary.LittleEndian.Uint64(b[8:]), count: binary.LittleEndian.Uint64(b[16:])}
	switch {
	case string(b[:4]) != blMagic:
		return h, errors.New("baseline: bad magic")
	case h.mode < blModePut || h.mode > blModeRR:
		return h, fmt.Errorf("baseline: mode %d", h.mode)
	case h.size == 0 || h.size > blMaxSize:
		return h, fmt.Errorf("baseline: size %d", h.size)
	case h.count > blMaxCount:
		return h, fmt.Errorf("baseline: count %d", h.count)
	}
	return h, nil
}

// cmdBaselineServer runs the plain-TCP baseline server; it prints
// "ready ADDR" and serves until ctx ends.
func cmdBaselineServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench baseline-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address HOST:PORT (port 0 picks one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if _, _, err := splitHostPort(*listen); err != nil {
		return usagef("--listen %q: want HOST:PORT", *listen)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	s := newBaselineServer(ln)
	fmt.Fprintf(stdout, "ready %s\n", ln.Addr())
	if f, ok := stdout.(interface{ Sync() error }); ok {
		_ = f.Sync()
	}
	<-ctx.Done()
	s.Close()
	return nil
}

// baselineServer serves the baseline protocol on a listener.
type baselineServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

func newBaselineServer(ln net.Listener) *baselineServer {
	s := &baselineServer{ln: ln, conns: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

func (s *baselineServer) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for their
// goroutines.
func (s *baselineServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	s.done = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *baselineServer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			serveBaselineConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// serveBaselineConn serves exchanges on c until the client closes it or
// sends something malformed.
func serveBaselineConn(c net.Conn) {
	br := bufio.NewReaderSize(c, 64<<10)
	bw := bufio.NewWriterSize(c, 64<<10)
	hb := make([]byte, blHdrLen)
	var buf []byte
	for {
		if _, err := io.ReadFull(br, hb); err != nil {
			return
		}
		h, err := decodeBLHeader(hb)
		if err != nil {
			return
		}
		if uint64(cap(buf)) < h.size {
			buf = make([]byte, h.size)
		}
		p := buf[:h.size]
		switch h.mode {
		case blModePut:
			for range h.count {
				if _, err := io.ReadFull(br, p); err != nil {
					return
				}
			}
			if _, err := c.Write([]byte{1}); err != nil {
				return
			}
		case blModeGet:
			for range h.count {
				if _, err := c.Write(p); err != nil {
					return
				}
			}
		case blModeRR:
			for range h.count {
				if _, err := io.ReadFull(br, p); err != nil {
					return
				}
				if _, err := bw.Write(p); err != nil {
					return
				}
				// Answer at once unless another whole request is already
				// here (then the replies go out together).
				if uint64(br.Buffered()) < h.size {
					if err := bw.Flush(); err != nil {
						return
					}
				}
			}
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}

// blConns is the client side: conns connections to a baseline server, closed
// when ctx ends so no exchange outlives it.
type blConns struct {
	conns []net.Conn
	stop  func() bool
}

func dialBaseline(ctx context.Context, addr string, n int) (*blConns, error) {
	var d net.Dialer
	b := &blConns{}
	for range n {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("dial baseline server %s: %w", addr, err)
		}
		b.conns = append(b.conns, c)
	}
	b.stop = context.AfterFunc(ctx, func() {
		for _, c := range b.conns {
			c.Close()
		}
	})
	return b, nil
}

// abort closes every connection so the other exchanges of a phase fail
// instead of waiting for a peer that will not answer.
func (b *blConns) abort() {
	for _, c := range b.conns {
		c.Close()
	}
}

func (b *blConns) Close() {
	if b.stop != nil {
		b.stop()
	}
	for _, c := range b.conns {
		c.Close()
	}
}

// share splits total over n parts as evenly as possible.
func share(total, n, i int) int {
	s := total / n
	if i < total%n {
		s++
	}
	return s
}

// blStream moves count operations of size bytes over the connections
// (put: client to server; get: server to client), after warmup untimed
// ones, and returns the time of the timed phase.
func blStream(ctx context.Context, addr string, op string, size uint64, count, warmup, conns int) (time.Duration, error) {
	b, err := dialBaseline(ctx, addr, conns)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	mode := byte(blModePut)
	if op == "get" {
		mode = blModeGet
	}
	bufs := make([][]byte, len(b.conns))
	for i := range bufs {
		bufs[i] = make([]byte, size)
		rand.Read(bufs[i])
	}
	phase := func(n int) (time.Duration, error) {
		var wg sync.WaitGroup
		errs := make([]error, len(b.conns))
		t0 := time.Now()
		for i, c := range b.conns {
			k := share(n, len(b.conns), i)
			if k == 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if errs[i] = blStreamConn(c, mode, bufs[i], k); errs[i] != nil {
					b.abort()
				}
			}()
		}
		wg.Wait()
		d := time.Since(t0)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		return d, errors.Join(errs...)
	}
	if warmup > 0 {
		if _, err := phase(warmup); err != nil {
			return 0, fmt.Errorf("baseline %s stream warm-up: %w", op, err)
		}
	}
	d, err := phase(count)
	if err != nil {
		return 0, fmt.Errorf("baseline %s stream: %w", op, err)
	}
	return d, nil
}

func blStreamConn(c net.Conn, mode byte, p []byte, n int) error {
	if _, err := c.Write(blHeader{mode: mode, size: uint64(len(p)), count: uint64(n)}.encode()); err != nil {
		return err
	}
	if mode == blModePut {
		for range n {
			if _, err := c.Write(p); err != nil {
				return err
			}
		}
		var ack [1]byte
		_, err := io.ReadFull(c, ack[:])
		return err
	}
	for range n {
		if _, err := io.ReadFull(c, p); err != nil {
			return err
		}
	}
	return nil
}

// blPingPong does count round trips of size bytes, one at a time on one
// connection, after warmup untimed ones; it returns the sorted latencies.
func blPingPong(ctx context.Context, addr string, size uint64, count, warmup int) ([]time.Duration, error) {
	b, err := dialBaseline(ctx, addr, 1)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	c := b.conns[0]
	req := make([]byte, size)
	rand.Read(req)
	resp := make([]byte, size)
	lat := make([]time.Duration, count)
	phase := func(n int, timed bool) error {
		if _, err := c.Write(blHeader{mode: blModeRR, size: size, count: uint64(n)}.encode()); err != nil {
			return err
		}
		for i := range n {
			t0 := time.Now()
			if _, err := c.Write(req); err != nil {
				return err
			}
			if _, err := io.ReadFull(c, resp); err != nil {
				return err
			}
			if timed {
				lat[i] = time.Since(t0)
			}
		}
		return nil
	}
	if warmup > 0 {
		if err := phase(warmup, false); err != nil {
			return nil, fmt.Errorf("baseline ping-pong warm-up: %w", errors.Join(ctx.Err(), err))
		}
	}
	if err := phase(count, true); err != nil {
		return nil, fmt.Errorf("baseline ping-pong: %w", errors.Join(ctx.Err(), err))
	}
	slices.Sort(lat)
	return lat, nil
}

// blPipeline does count request/response exchanges of size bytes with
// depth in flight, spread over conns connections, after warmup untimed
// ones; it returns the time of the timed phase.
func blPipeline(ctx context.Context, addr string, size uint64, count, depth, warmup, conns int) (time.Duration, error) {
	conns = min(conns, depth)
	b, err := dialBaseline(ctx, addr, conns)
	if err != nil {
		return 0, err
	}
	defer b.Close()
	phase := func(n int) (time.Duration, error) {
		var wg sync.WaitGroup
		errs := make([]error, len(b.conns))
		t0 := time.Now()
		for i, c := range b.conns {
			k := share(n, len(b.conns), i)
			if k == 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if errs[i] = blPipelineConn(c, size, k, share(depth, len(b.conns), i)); errs[i] != nil {
					b.abort()
				}
			}()
		}
		wg.Wait()
		d := time.Since(t0)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		return d, errors.Join(errs...)
	}
	if warmup > 0 {
		if _, err := phase(warmup); err != nil {
			return 0, fmt.Errorf("baseline pipeline warm-up: %w", err)
		}
	}
	d, err := phase(count)
	if err != nil {
		return 0, fmt.Errorf("baseline pipeline: %w", err)
	}
	return d, nil
}

// blPipelineConn keeps up to window requests in flight on c: a writer
// buffers requests while the window has room and flushes before it has to
// wait; the reader takes replies and frees window slots.
func blPipelineConn(c net.Conn, size uint64, n, window int) error {
	if _, err := c.Write(blHeader{mode: blModeRR, size: size, count: uint64(n)}.encode()); err != nil {
		return err
	}
	slots := make(chan struct{}, window)
	werr := make(chan error, 1)
	go func() {
		bw := bufio.NewWriterSize(c, 64<<10)
		req := make([]byte, size)
		for range n {
			select {
			case slots <- struct{}{}:
			default:
				if err := bw.Flush(); err != nil {
					werr <- err
					return
				}
				slots <- struct{}{}
			}
			if _, err := bw.Write(req); err != nil {
				werr <- err
				return
			}
		}
		werr <- bw.Flush()
	}()
	br := bufio.NewReaderSize(c, 64<<10)
	resp := make([]byte, size)
	var rerr error
	for range n {
		if _, err := io.ReadFull(br, resp); err != nil {
			rerr = err
			break
		}
		<-slots
	}
	if rerr != nil {
		// Unblock a writer waiting for a slot or in a write.
		c.Close()
		for {
			select {
			case <-slots:
				continue
			case err := <-werr:
				return errors.Join(rerr, err)
			}
		}
	}
	return <-werr
}
