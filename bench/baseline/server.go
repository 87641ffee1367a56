package baseline

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
)

// Server serves the baseline protocol on a listener.
type Server struct {
	ln net.Listener
	wg sync.WaitGroup // the accept loop and one per connection

	mu    sync.Mutex // guards conns and done
	conns map[net.Conn]struct{}
	done  bool
}

// NewServer serves ln until Close.
func NewServer(ln net.Listener) *Server {
	s := &Server{ln: ln, conns: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// Addr is the listener's address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for their
// goroutines.
func (s *Server) Close() {
	s.ln.Close()
	s.mu.Lock()
	s.done = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) acceptLoop() {
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
			serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// conn is the server's side of one connection.
type conn struct {
	c   net.Conn
	br  *bufio.Reader
	bw  *bufio.Writer
	buf []byte // reused for every operation, grown to the largest
}

// serveConn serves exchanges on c until the client closes it or sends
// something malformed.
func serveConn(c net.Conn) {
	sc := &conn{c: c, br: bufio.NewReaderSize(c, 64<<10), bw: bufio.NewWriterSize(c, 64<<10)}
	hb := make([]byte, hdrLen)
	for {
		if _, err := io.ReadFull(sc.br, hb); err != nil {
			return
		}
		h, err := decodeHeader(hb)
		if err != nil {
			return
		}
		total := h.size * h.nslots()
		if uint64(cap(sc.buf)) < total {
			sc.buf = make([]byte, total)
		}
		p := sc.buf[:total]
		switch h.mode {
		case modePut:
			err = sc.put(p, h.size, h.count)
		case modeGet:
			err = sc.get(p, h.size, h.count)
		case modeRR:
			err = sc.requestResponse(p[:h.size], h.count)
		}
		if err != nil {
			return
		}
	}
}

// slot is the i-th operation's size bytes of the slots in p, in turn.
func slot(p []byte, size, i uint64) []byte {
	off := i % (uint64(len(p)) / size) * size
	return p[off : off+size]
}

// put reads count operations into the slots of p, in turn, and
// acknowledges them with one byte.
func (sc *conn) put(p []byte, size, count uint64) error {
	for i := range count {
		if _, err := io.ReadFull(sc.br, slot(p, size, i)); err != nil {
			return err
		}
	}
	_, err := sc.c.Write([]byte{1})
	return err
}

// get writes count operations from the slots of p, in turn.
func (sc *conn) get(p []byte, size, count uint64) error {
	for i := range count {
		if _, err := sc.c.Write(slot(p, size, i)); err != nil {
			return err
		}
	}
	return nil
}

// requestResponse answers each of count requests with as many bytes.
func (sc *conn) requestResponse(p []byte, count uint64) error {
	for range count {
		if _, err := io.ReadFull(sc.br, p); err != nil {
			return err
		}
		if _, err := sc.bw.Write(p); err != nil {
			return err
		}
		// Answer at once unless another whole request is already here
		// (then the replies go out together).
		if uint64(sc.br.Buffered()) < uint64(len(p)) {
			if err := sc.bw.Flush(); err != nil {
				return err
			}
		}
	}
	return sc.bw.Flush()
}
