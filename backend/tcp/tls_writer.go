package tcp

import (
	"net"
	"os"
	"sync"
	"time"
)

// tlsBufConn makes a TLS data connection safe for writes that a deadline
// interrupts and that then go on on the same connection: the client's
// cancellation (cancel.go), the server's cut grace (server_batch.go,
// cutLeft). A *tls.Conn cannot do that: a timed-out write leaves its
// record layer corrupt and every later write fails. So writes go through
// a bounded buffer (at most tlsPending bytes) that one flusher goroutine
// drains into the TLS connection, and the write deadline applies only to
// waiting for room in that buffer: a write interrupted by it returns
// cleanly, having copied what it reports, and the stream stays whole.
// Once Write returns, the caller's memory is not read again (the bytes
// were copied), as the route and a revocation require. Reads, read
// deadlines (which a *tls.Conn survives) and everything else go to the
// TLS connection. One writer at a time (the route's sender, the server's
// connection goroutine or its keep-alive, never two at once): a Write that
// waits for room may otherwise interleave with another.
type tlsBufConn struct {
	net.Conn // the TLS connection (a server's runs its handshake on first use: tlsServerConn)

	kick      chan struct{} // wakes the flusher (cap 1)
	room      chan struct{} // the flusher freed room (cap 1)
	dlChanged chan struct{} // SetWriteDeadline was called (cap 1)
	closed    chan struct{} // closed by Close
	flushed   chan struct{} // closed when the flusher returns
	closeOnce sync.Once

	mu      sync.Mutex // guards the fields below
	pending []byte     // written, not yet handed to TLS
	busy    bool       // the flusher is handing bytes to TLS
	wdl     time.Time
	err     error // the flusher's; sticky
}

const tlsPending = 256 << 10

// newTLSBufConn wraps c and starts its flusher, which Close waits for.
func newTLSBufConn(c net.Conn) *tlsBufConn {
	t := &tlsBufConn{
		Conn:      c,
		kick:      make(chan struct{}, 1),
		room:      make(chan struct{}, 1),
		dlChanged: make(chan struct{}, 1),
		closed:    make(chan struct{}),
		flushed:   make(chan struct{}),
	}
	go t.flush()
	return t
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Write copies p into the buffer, waiting for room until the write
// deadline.
func (t *tlsBufConn) Write(p []byte) (n int, err error) {
	for len(p) > 0 {
		t.mu.Lock()
		if t.err != nil {
			t.mu.Unlock()
			return n, t.err
		}
		dl := t.wdl
		if !dl.IsZero() && !time.Now().Before(dl) {
			t.mu.Unlock()
			return n, os.ErrDeadlineExceeded
		}
		if free := tlsPending - len(t.pending); free > 0 {
			k := min(free, len(p))
			t.pending = append(t.pending, p[:k]...)
			p, n = p[k:], n+k
			t.mu.Unlock()
			signal(t.kick)
			continue
		}
		t.mu.Unlock()
		var timeout <-chan time.Time
		if !dl.IsZero() {
			tm := time.NewTimer(time.Until(dl))
			timeout = tm.C
			defer tm.Stop()
		}
		select {
		case <-t.room:
		case <-t.dlChanged:
		case <-timeout:
		case <-t.closed:
			return n, os.ErrClosed
		}
	}
	return n, nil
}

// flush hands buffered bytes to TLS in order until Close or an error. It
// swaps buffers with Write's side instead of copying; an idle connection
// keeps neither.
func (t *tlsBufConn) flush() {
	defer close(t.flushed)
	var buf []byte
	for {
		t.mu.Lock()
		buf, t.pending = t.pending, buf[:0]
		t.busy = len(buf) > 0
		t.mu.Unlock()
		if len(buf) == 0 {
			buf = nil
			select {
			case <-t.kick:
				continue
			case <-t.closed:
				return
			}
		}
		signal(t.room)
		if _, err := t.Conn.Write(buf); err != nil {
			t.mu.Lock()
			t.err = err
			t.mu.Unlock()
			signal(t.room)
			return
		}
	}
}

// SetWriteDeadline bounds waiting for room in the buffer.
func (t *tlsBufConn) SetWriteDeadline(d time.Time) error {
	t.mu.Lock()
	t.wdl = d
	t.mu.Unlock()
	signal(t.dlChanged)
	return nil
}

// SetDeadline sets the read deadline on the TLS connection and the write
// deadline here.
func (t *tlsBufConn) SetDeadline(d time.Time) error {
	_ = t.SetWriteDeadline(d)
	return t.Conn.SetReadDeadline(d)
}

// Close closes the TLS connection and waits for the flusher.
func (t *tlsBufConn) Close() error {
	var err error
	t.closeOnce.Do(func() {
		close(t.closed)
		err = t.Conn.Close()
	})
	<-t.flushed
	return err
}

// drain waits, for at most max, until every byte written went to TLS (or
// the flusher failed): Close discards what is still buffered, where a
// plain socket's close leaves it to the kernel to deliver. The server
// drains before it closes a connection it served (closeServed): a refused
// hello's answer, the last answers to a peer that is done.
func (t *tlsBufConn) drain(max time.Duration) {
	end := time.Now().Add(max)
	for {
		t.mu.Lock()
		done := (len(t.pending) == 0 && !t.busy) || t.err != nil
		t.mu.Unlock()
		if done || !time.Now().Before(end) {
			return
		}
		select {
		case <-t.closed:
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// handshake runs an accepted connection's TLS handshake (tlsServerConn)
// before anything is written, bounded by deadline on the socket itself:
// the handshake's own writes included (the buffer's deadline does not
// reach them). A dialled connection has done its handshake already.
func (t *tlsBufConn) handshake(deadline time.Time) error {
	s, ok := t.Conn.(*tlsServerConn)
	if !ok {
		return nil
	}
	if err := s.Conn.SetDeadline(deadline); err != nil {
		return err
	}
	err := s.handshake()
	if derr := s.Conn.SetWriteDeadline(time.Time{}); err == nil && derr != nil { // the flusher's writes are bounded by the buffer's deadline
		err = derr
	}
	return err
}
