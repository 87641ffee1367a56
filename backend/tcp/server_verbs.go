package tcp

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/word"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// The owner's side of PutWithImm (write-imm), Send and the atomics. Each
// is served in the connection's order, like the others; a refusal is
// answered with its code and changes nothing the peer may not change,
// and the connection serves on.

// codeAborted answers a write-imm or send whose initiator cut it short
// (trailer abort): it has ended the operation already and drops the
// answer.
const codeAborted = byte(rdmapb.Code_INVALID_ARGUMENT)

// errAborted ends the landing of a message its sender cut short.
var errAborted = errors.New("tcp: message cut short by its sender")

// serveWriteImm writes a write-imm's payload as a WRITE does and then,
// once the bytes are in place and the trailer commits, hands the event to
// the inbox; the answer carries the inbox's refusal, if any. The event
// covers the total bytes that end with this frame's; the peer must be
// allowed to write and notify all of them. An error is the connection's.
func (s *serverConn) serveWriteImm(br *connReader, h *reqHeader) error {
	frameEnd := time.Now().Add(s.b.cfg.FrameTimeout)
	end := h.offset + uint64(h.length)
	var ref memreg.Ref
	verr := rdmamgr.ErrOutOfRange
	if end >= h.offset && h.total <= end {
		ref, verr = s.acquire(h, end-h.total, h.total, backend.OpWriteImm.Need())
	}
	var code byte
	if verr != nil {
		s.rejected()
		if err := s.discard(br, int64(h.length), frameEnd); err != nil {
			return err
		}
		code = byte(backend.RemoteCode(verr))
	} else {
		var err error
		code, err = s.write(br, ref, ref.Bytes()[h.total-uint64(h.length):])
		if err != nil {
			return err
		}
	}
	commit, err := s.readTrailer(br, frameEnd)
	if err != nil {
		return err
	}
	switch {
	case code != 0:
	case !commit:
		code = codeAborted
	default:
		s.servedIn(uint64(h.length), h.first)
		s.publishServed() // counted before the owner hears of it, as before
		ev := backend.Event{Peer: s.peerID, Region: h.region, Offset: end - h.total, Length: h.total, Imm: h.imm}
		deferred, err := s.eventLate(h, ev) // late.go
		if deferred {
			return nil // answered once the agent's process answers
		}
		code = byte(backend.Code(err))
	}
	s.appendResp(respHeader{op: h.op, code: code, wrid: h.wrid}, memreg.Ref{})
	return nil
}

// serveSend lands a send's payload in the receive buffer the inbox hands
// out, and delivers it (Landing.Done) once every byte is there and the
// trailer commits. A refusal (none posted, too small, a full queue)
// drains the payload. An error is the connection's; the landing is then
// given back.
func (s *serverConn) serveSend(br *connReader, h *reqHeader) error {
	frameEnd := time.Now().Add(s.b.cfg.FrameTimeout)
	n := int(h.length)
	l, rerr := s.recv(h, uint64(n))
	if rerr == nil && len(l.Mem()) < n {
		rerr = fmt.Errorf("tcp: landing of %d bytes for %d: %w", len(l.Mem()), n, rdmamgr.ErrReceiveTooSmall)
		l.Done(0, 0, false, rerr)
	}
	if rerr != nil {
		s.rejected()
		if err := s.discard(br, int64(n), frameEnd); err != nil {
			return err
		}
		if _, err := s.readTrailer(br, frameEnd); err != nil {
			return err
		}
		s.appendResp(respHeader{op: h.op, code: byte(backend.Code(rerr)), wrid: h.wrid}, memreg.Ref{})
		return nil
	}
	err := s.readMessage(br, l.Mem()[:n], frameEnd)
	var commit bool
	if err == nil {
		commit, err = s.readTrailer(br, frameEnd)
	}
	switch {
	case err != nil:
		l.Done(0, 0, false, err)
		return err
	case !commit:
		l.Done(0, 0, false, errAborted)
		s.appendResp(respHeader{op: h.op, code: codeAborted, wrid: h.wrid}, memreg.Ref{})
		return nil
	}
	s.servedIn(uint64(n), true) // a send is one frame
	s.publishServed()           // counted before the owner hears of it, as before
	var code byte
	if al, ok := l.(agentapi.AsyncLanding); ok { // a host agent's: answered later
		answer := s.deferAnswer(h.op, h.wrid)
		err := al.DeliverAsync(n, h.imm, h.hasImm, answer)
		if err == nil {
			return nil
		}
		s.undefer()
		code = byte(backend.Code(err))
	} else if cl, ok := l.(agentapi.CheckedLanding); ok { // a host agent's: it can still refuse
		code = byte(backend.Code(cl.Deliver(n, h.imm, h.hasImm)))
	} else {
		l.Done(n, h.imm, h.hasImm, nil)
	}
	s.appendResp(respHeader{op: h.op, code: code, wrid: h.wrid}, memreg.Ref{})
	return nil
}

// readMessage reads a send's payload into mem until deadline. A receive
// buffer is the owner's own memory, held by the inbox: no revocation or
// lease cuts it.
func (s *serverConn) readMessage(br *connReader, mem []byte, deadline time.Time) error {
	if br.Buffered() >= len(mem) {
		_, err := io.ReadFull(br, mem)
		return err
	}
	if len(s.segs) > 0 { // the batch's READ references must not wait on this payload
		if err := s.flush(); err != nil {
			return err
		}
	}
	if err := s.c.SetReadDeadline(deadline); err != nil {
		return err
	}
	if _, err := io.ReadFull(br, mem); err != nil {
		return err
	}
	return s.c.SetReadDeadline(time.Time{})
}

// readTrailer reads the byte that ends a write-imm or a send: commit or
// abort; anything else breaks the protocol.
func (s *serverConn) readTrailer(br *connReader, deadline time.Time) (commit bool, err error) {
	if br.Buffered() < trailerSize {
		if err := s.c.SetReadDeadline(deadline); err != nil {
			return false, err
		}
		defer s.c.SetReadDeadline(time.Time{})
	}
	t, err := br.ReadByte()
	if err != nil {
		return false, err
	}
	switch t {
	case trailerCommit:
		return true, nil
	case trailerAbort:
		return false, nil
	}
	s.rejected()
	return false, fmt.Errorf("tcp: trailer %#x: %w", t, rdmamgr.ErrProtocol)
}

// serveAtomic runs a compare-swap or fetch-add on the word the peer may
// use atomically, with the processor's atomic instructions, and answers
// its old value. A word whose address is not 8-byte aligned (a region
// registered at an odd address) is refused with MISALIGNED.
func (s *serverConn) serveAtomic(h *reqHeader) {
	ref, err := s.acquire(h, h.offset, 8, backend.OpFetchAdd.Need())
	var old uint64
	if err == nil {
		if h.op == opCompareSwap {
			old, err = word.CompareAndSwap(ref.Bytes(), 0, h.compare, h.swap)
		} else {
			old, err = word.FetchAdd(ref.Bytes(), 0, h.swap)
		}
		ref.Release()
	}
	if err != nil {
		s.rejected()
		s.appendResp(respHeader{op: h.op, code: byte(backend.RemoteCode(err)), wrid: h.wrid}, memreg.Ref{})
		return
	}
	s.servedAtomic()
	s.appendResp(respHeader{op: h.op, wrid: h.wrid, value: old}, memreg.Ref{})
}
