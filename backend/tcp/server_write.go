package tcp

import (
	"errors"
	"io"
	"os"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Serving a WRITE or a READ, and reading a payload into a region while
// remote access to it holds (a cut wakes it: server_frames.go).

// serveRW serves a WRITE or a READ. An error is the connection's.
func (s *serverConn) serveRW(br *connReader, h *reqHeader) error {
	ref, verr := s.acquireRW(h, h.offset, uint64(h.length), h.op)
	if verr != nil {
		s.rejected()
		if h.op == opWrite {
			// Keep the stream in step: drop the payload, touch nothing.
			if err := s.discard(br, int64(h.length), time.Now().Add(s.b.cfg.FrameTimeout)); err != nil {
				return err
			}
		}
		s.appendResp(respHeader{op: h.op, code: byte(backend.RemoteCode(verr)), wrid: h.wrid}, memreg.Ref{})
		return nil
	}
	if span, ok := ref.Device(); ok { // device memory: staged (stage.go)
		if h.op == opRead {
			return s.readDevice(h, ref, span)
		}
		code, err := s.writeDevice(br, ref, span)
		if err != nil {
			return err
		}
		if code == 0 {
			s.servedIn(uint64(h.length), h.first)
		}
		s.appendResp(respHeader{op: h.op, code: code, wrid: h.wrid}, memreg.Ref{})
		return nil
	}
	if h.op == opRead {
		s.appendResp(respHeader{op: h.op, length: h.length, wrid: h.wrid}, ref)
		s.segs[len(s.segs)-1].first = h.first
		return nil
	}
	code, err := s.write(br, ref, ref.Bytes())
	if err != nil {
		return err
	}
	if code == 0 {
		s.servedIn(uint64(h.length), h.first)
	}
	s.appendResp(respHeader{op: h.op, code: code, wrid: h.wrid}, memreg.Ref{})
	return nil
}

// write reads a WRITE's payload into mem, memory ref admitted for it, and
// releases ref (write takes it over). It returns a non-zero code when
// remote access to the region was cut while the payload arrived (revoked, released, lease
// run out): from then on the payload went to a sink, not the region. An
// error is a failure of the connection (frame timeout, I/O).
func (s *serverConn) write(br *connReader, ref memreg.Ref, mem []byte) (byte, error) {
	defer ref.Release()
	if br.Buffered() >= len(mem) {
		// All there already: no wait, nothing to cut.
		_, err := br.ReadFull(mem)
		return 0, err
	}
	// The batch's READ references must not wait on this payload (a
	// revocation waits for them), nor its answers on a large one; the
	// answers wait for the rest of a small one, which is on its way: they
	// go out together, a send saved.
	if s.payload > 0 || (len(s.segs) > 0 && len(mem) > largeReadBuf) {
		if err := s.flush(); err != nil {
			return 0, err
		}
	}
	frameEnd := time.Now().Add(s.b.cfg.FrameTimeout)
	n, cause, err := s.readInto(br, ref.Region(), mem, frameEnd)
	ref.Release() // before draining the rest: a cut region is let go now
	if err == nil && cause != nil {
		s.rejected()
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
func (s *serverConn) readInto(br *connReader, r *memreg.Region, mem []byte, frameEnd time.Time) (n int, cause, err error) {
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
			if left == 0 {
				// Over on the real clock, which RemoteErr reads only
				// near a lease's end: a coarse clock late by more than
				// that must not make this loop spin on a deadline of now.
				return n, rdmamgr.ErrExpired, nil
			}
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
func (s *serverConn) discard(br *connReader, n int64, deadline time.Time) error {
	if int64(br.Buffered()) < n {
		if err := s.c.SetReadDeadline(deadline); err != nil {
			return err
		}
		defer s.c.SetReadDeadline(time.Time{})
	}
	_, err := io.CopyN(io.Discard, br, n)
	return err
}
