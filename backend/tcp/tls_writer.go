package tcp

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// tlsBufConn makes a TLS data connection safe for writes that a deadline
// interrupts and that then go on on the same connection: the client's
// cancellation (cancel.go), the server's cut grace (server_batch.go,
// cutLeft). A *tls.Conn cannot do that: a write whose socket write times
// out leaves its record layer corrupt and every later write fails.
//
// So the TLS connection writes to the socket through rawConn, which,
// once the handshake is done, never fails a write on a timeout: it keeps
// the rest of that record's ciphertext and tells TLS the record went out.
// tlsBufConn hands TLS one record's plaintext at a time, in the writer's
// own goroutine (no copy of large payloads, no hand-over to another
// goroutine), and after each record looks whether the socket cut it
// short: then the write returns os.ErrDeadlineExceeded, with the record
// counted as written (it was encrypted: the caller's memory is not read
// again), and the next write sends the kept ciphertext first, under its
// own deadline. The stream stays whole, and at most about one record is
// ever kept. Small pieces of a gathered write (WriteBuffers: headers,
// small payloads) are copied into records of up to maxRecord bytes, so a
// batch of small frames costs a few records, not one each.
//
// Deadlines are the socket's. Reads go to the TLS connection. One writer
// at a time (the route's sender, the server's connection goroutine or its
// keep-alive, never two at once).
type tlsBufConn struct {
	net.Conn          // the TLS connection (a server's runs its handshake on first use: tlsServerConn)
	raw      *rawConn // the socket under it
	ready    bool     // the writer's: the handshake is done and raw keeps cut records
	closeErr error
	once     sync.Once
}

// maxRecord is the most plaintext one TLS record carries.
const maxRecord = 16 << 10

// newTLSBufConn wraps tc, the TLS connection over raw. It starts nothing.
func newTLSBufConn(tc net.Conn, raw *rawConn) *tlsBufConn {
	return &tlsBufConn{Conn: tc, raw: raw}
}

// rawConn is the socket under a data connection's TLS. Until armed (the
// handshake done), it is the socket. Armed, a write the socket's deadline
// cuts short keeps the rest of the bytes (pending) and reports them
// written; the next write, and flush, send them first.
type rawConn struct {
	net.Conn
	armed atomic.Bool
	dirty atomic.Bool // pending is not empty or cut is set: flush or takeCut has work
	// recording: the writer is in tlsBufConn.record; only a cut of its
	// writes is its to hear of (TLS writes on its own during a Read too:
	// a KeyUpdate's answer, an alert).
	recording atomic.Bool

	mu      sync.Mutex // guards pending and cut; held across the socket's writes
	pending []byte     // ciphertext TLS handed over that the socket did not take yet
	cut     bool       // a write was cut short since takeCut last looked
}

func (r *rawConn) Write(b []byte) (int, error) {
	if !r.armed.Load() {
		return r.Conn.Write(b)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) > 0 {
		if err := r.flushLocked(); err != nil {
			if !isTimeout(err) {
				return 0, err
			}
			r.keepLocked(b)
			return len(b), nil
		}
	}
	n, err := r.Conn.Write(b)
	if err != nil && isTimeout(err) {
		r.keepLocked(b[n:])
		return len(b), nil
	}
	return n, err
}

func (r *rawConn) keepLocked(b []byte) {
	r.pending = append(r.pending, b...)
	r.cut = r.cut || r.recording.Load()
	r.dirty.Store(true)
}

// flushLocked writes what is pending, under the socket's write deadline.
func (r *rawConn) flushLocked() error {
	n, err := r.Conn.Write(r.pending)
	if n == len(r.pending) {
		r.pending = nil // an idle connection keeps no buffer
	} else {
		r.pending = append(r.pending[:0], r.pending[n:]...)
	}
	r.dirty.Store(len(r.pending) > 0 || r.cut)
	return err
}

// flush writes what is pending (nothing, at once, in the common case).
func (r *rawConn) flush() error {
	if !r.dirty.Load() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 {
		return nil
	}
	return r.flushLocked()
}

// takeCut reports whether a write was cut short since it last looked.
func (r *rawConn) takeCut() bool {
	if !r.dirty.Load() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cut
	r.cut = false
	r.dirty.Store(len(r.pending) > 0)
	return c
}

// arm makes sure the handshake is done (a server's runs on first use) and
// arms raw; the writer's, before its first write.
func (t *tlsBufConn) arm() error {
	if t.ready {
		return nil
	}
	if s, ok := t.Conn.(*tlsServerConn); ok {
		if err := s.handshake(); err != nil {
			return err
		}
	}
	t.raw.armed.Store(true)
	t.ready = true
	return nil
}

// record hands b (at most maxRecord bytes) to TLS. taken says b was
// encrypted; err is os.ErrDeadlineExceeded when the socket took only part
// of its ciphertext before the write deadline, or the failure that broke
// the connection.
func (t *tlsBufConn) record(b []byte) (taken bool, err error) {
	t.raw.recording.Store(true)
	_, err = t.Conn.Write(b)
	t.raw.recording.Store(false)
	if err != nil {
		return false, err
	}
	if t.raw.takeCut() {
		return true, os.ErrDeadlineExceeded
	}
	return true, nil
}

// Write writes p as records of at most maxRecord bytes; see tlsBufConn.
func (t *tlsBufConn) Write(p []byte) (n int, err error) {
	if err := t.arm(); err != nil {
		return 0, err
	}
	for {
		// What a cut kept goes first, and goes also when nothing follows
		// it (the call after a cut of the last record).
		if err := t.raw.flush(); err != nil {
			return n, err
		}
		if len(p) == 0 {
			return n, nil
		}
		k := min(len(p), maxRecord)
		taken, err := t.record(p[:k])
		if taken {
			n, p = n+k, p[k:]
		}
		if err != nil {
			return n, err
		}
	}
}

var stages = sync.Pool{New: func() any { b := make([]byte, 0, maxRecord); return &b }}

// WriteBuffers writes v as net.Buffers.WriteTo does (what was written is
// consumed from v), as records: pieces of maxRecord bytes or more go to
// TLS straight from their memory, smaller ones are gathered into a record
// first (a large piece after them tops that record up).
func (t *tlsBufConn) WriteBuffers(v *net.Buffers) (n int64, err error) {
	if err := t.arm(); err != nil {
		return 0, err
	}
	sp := stages.Get().(*[]byte)
	defer func() {
		*sp = (*sp)[:0]
		stages.Put(sp)
	}()
	for {
		// Nothing of v is taken for this record yet; what a cut kept goes
		// first, also when nothing follows it.
		if err := t.raw.flush(); err != nil {
			return n, err
		}
		if len(*v) == 0 {
			return n, nil
		}
		var rec []byte
		if b := (*v)[0]; len(b) >= maxRecord {
			rec = b[:maxRecord]
			consume(v, maxRecord)
		} else {
			rec = gather((*sp)[:0], v)
			*sp = rec
		}
		taken, err := t.record(rec)
		if taken {
			n += int64(len(rec))
		}
		if err != nil {
			return n, err
		}
	}
}

// gather copies v's first bytes into stage (empty, capacity maxRecord)
// until it is full or v is empty, consuming them from v.
func gather(stage []byte, v *net.Buffers) []byte {
	for len(*v) > 0 && len(stage) < maxRecord {
		b := (*v)[0]
		k := min(len(b), maxRecord-len(stage))
		stage = append(stage, b[:k]...)
		consume(v, k)
	}
	return stage
}

// consume drops v's first k bytes (at most its first piece's).
func consume(v *net.Buffers, k int) {
	if b := (*v)[0]; k < len(b) {
		(*v)[0] = b[k:]
		return
	}
	(*v)[0] = nil
	*v = (*v)[1:]
}

// Close closes the socket (no close_notify: it could wait for a peer that
// does not read). Idempotent.
func (t *tlsBufConn) Close() error {
	t.once.Do(func() { t.closeErr = t.raw.Conn.Close() })
	return t.closeErr
}

// drain sends what a cut kept, for at most max: Close discards it, where
// a plain socket's close leaves it to the kernel to deliver. The server
// drains before it closes a connection it served (closeServed): a refused
// hello's answer, the last answers to a peer that is done.
func (t *tlsBufConn) drain(max time.Duration) {
	if !t.raw.dirty.Load() {
		return
	}
	_ = t.raw.Conn.SetWriteDeadline(time.Now().Add(max))
	_ = t.raw.flush()
}

// handshake runs an accepted connection's TLS handshake (tlsServerConn)
// before anything is written, bounded by deadline on the socket itself;
// the write deadline stays. A dialled connection has done its handshake
// already.
func (t *tlsBufConn) handshake(deadline time.Time) error {
	s, ok := t.Conn.(*tlsServerConn)
	if !ok {
		return nil
	}
	if err := s.Conn.SetDeadline(deadline); err != nil {
		return err
	}
	return t.arm()
}
