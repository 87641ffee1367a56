package tcp

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// aLongTimeAgo is a deadline that has passed: it wakes a blocked Read or
// Write at once.
var aLongTimeAgo = time.Unix(1, 0)

// serverConn serves one authenticated connection; used by one goroutine,
// and by CutRegion through cut.
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

	mu sync.Mutex // guards writing and flushing, and segs while flushing
	// writing is the region a WRITE payload is being read into (nil
	// between payloads); the read deadline is set under mu while it is.
	writing *buffer.Region
	// flushing: the batch is being written (the write deadline is set
	// under mu while it is).
	flushing bool
}

// cut wakes the connection's goroutine if it is blocked in r's memory.
// Called with b.mu held.
func (s *serverConn) cut(r *buffer.Region) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writing == r {
		// The reader checks RemoteErr after every wake-up: a lease that
		// was only renewed costs one more round of the loop.
		_ = s.c.SetReadDeadline(aLongTimeAgo)
	}
	// A READ admitted before its lease ran out may finish; one whose
	// region was revoked or is being released may not wait for a peer
	// that stopped reading: the write fails and the connection closes.
	if e := s.b.reg.RemoteErr(r); s.flushing && e != nil && e != buffer.ErrExpired {
		for _, g := range s.segs {
			if g.r == r {
				_ = s.c.SetWriteDeadline(aLongTimeAgo)
				break
			}
		}
	}
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
				if err := s.discard(br, int64(h.length), time.Now().Add(s.b.cfg.FrameTimeout)); err != nil {
					return err
				}
			}
			s.appendResp(respHeader{op: h.op, code: byte(backend.RemoteCode(verr)), wrid: h.wrid}, nil, nil)
			continue
		}
		switch h.op {
		case opWrite:
			code, err := s.write(br, r, mem)
			if err != nil {
				return err
			}
			if code != 0 {
				s.appendResp(respHeader{op: h.op, code: code, wrid: h.wrid}, nil, nil)
				continue
			}
			s.b.served.ops.Add(1)
			s.b.served.bytesIn.Add(uint64(h.length))
			s.appendResp(respHeader{op: h.op, wrid: h.wrid}, nil, nil)
		case opRead:
			s.appendResp(respHeader{op: h.op, length: h.length, wrid: h.wrid}, mem, r)
		}
	}
}

// write reads a WRITE's payload into mem, the memory of region r admitted
// for it, and drops r's reference. It returns a non-zero code when remote
// access to r was cut while the payload arrived (revoked, released, lease
// run out): from then on the payload went to a sink, not the region. An
// error is a failure of the connection (frame timeout, I/O).
func (s *serverConn) write(br *bufio.Reader, r *buffer.Region, mem []byte) (byte, error) {
	if br.Buffered() >= len(mem) {
		// All there already: no wait, nothing to cut.
		_, err := io.ReadFull(br, mem)
		r.UnrefRemote()
		return 0, err
	}
	// The batch's READ references must not wait on this payload.
	if len(s.segs) > 0 {
		if err := s.flush(); err != nil {
			r.UnrefRemote()
			return 0, err
		}
	}
	frameEnd := time.Now().Add(s.b.cfg.FrameTimeout)
	n, cause, err := s.readInto(br, r, mem, frameEnd)
	r.UnrefRemote()
	if err == nil && cause != nil {
		s.b.served.rejected.Add(1)
		err = s.discard(br, int64(len(mem)-n), frameEnd)
	}
	if err != nil {
		return 0, err
	}
	if err := s.c.SetReadDeadline(time.Time{}); err != nil {
		return 0, err
	}
	if cause != nil {
		return byte(backend.RemoteCode(cause)), nil
	}
	return 0, nil
}

// readInto reads mem from br while remote access to r holds, until
// frameEnd. It returns the bytes read and, if access was cut first, why.
func (s *serverConn) readInto(br *bufio.Reader, r *buffer.Region, mem []byte, frameEnd time.Time) (n int, cause, err error) {
	s.mu.Lock()
	s.writing = r
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.writing = nil
		s.mu.Unlock()
	}()
	for n < len(mem) {
		now := time.Now()
		dl := frameEnd
		if left, ok := s.b.reg.LeaseLeft(r); ok && now.Add(left).Before(dl) {
			dl = now.Add(left)
		}
		s.mu.Lock()
		err = s.c.SetReadDeadline(dl)
		s.mu.Unlock()
		if err != nil {
			return n, nil, err
		}
		// After the deadline is set: a cut from now on wakes the Read.
		if cause = s.b.reg.RemoteErr(r); cause != nil {
			return n, cause, nil
		}
		k, rerr := br.Read(mem[n:])
		n += k
		if rerr != nil {
			if errors.Is(rerr, os.ErrDeadlineExceeded) && time.Now().Before(frameEnd) {
				continue // cut, lease end or renewal: check again
			}
			return n, nil, rerr
		}
	}
	return n, nil, nil
}

// discard drops n payload bytes that must not land, keeping the stream in
// step, until deadline.
func (s *serverConn) discard(br *bufio.Reader, n int64, deadline time.Time) error {
	if int64(br.Buffered()) < n {
		if err := s.c.SetReadDeadline(deadline); err != nil {
			return err
		}
		defer s.c.SetReadDeadline(time.Time{})
	}
	_, err := io.CopyN(io.Discard, br, n)
	return err
}

func (s *serverConn) appendResp(h respHeader, mem []byte, r *buffer.Region) {
	n := len(s.out)
	s.out = append(s.out, make([]byte, respHeaderSize)...)
	h.encode(s.out[n:])
	s.segs = append(s.segs, respSeg{hdrEnd: len(s.out), mem: mem, r: r})
	s.payload += len(mem)
}

// flush writes the batch with one writev and drops the regions' references.
// A batch with READ payloads must leave within FrameTimeout, and sooner if
// one of its regions is revoked or released meanwhile (cut).
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
	timed := s.payload > 0
	var err error
	if timed {
		s.mu.Lock()
		s.flushing = true
		err = s.c.SetWriteDeadline(time.Now().Add(s.b.cfg.FrameTimeout))
		s.mu.Unlock()
		if err == nil {
			err = s.cutBeforeFlush()
		}
	}
	if err == nil {
		_, err = s.iov.WriteTo(s.c)
	}
	if timed {
		s.mu.Lock()
		s.flushing = false
		s.mu.Unlock()
	}
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

// cutBeforeFlush fails the batch if one of its regions was revoked or
// released before flushing was set (a cut then found nothing to wake).
func (s *serverConn) cutBeforeFlush() error {
	for _, g := range s.segs {
		if g.r == nil {
			continue
		}
		if e := s.b.reg.RemoteErr(g.r); e != nil && e != buffer.ErrExpired {
			return e
		}
	}
	return nil
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
