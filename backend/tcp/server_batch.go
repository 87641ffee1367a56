package tcp

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// A served connection's batch of answers and the cuts of its regions: one
// region's end (revoked, released, a proxy's process gone) ends that
// region's READs alone, never the batch or the connection, unless the
// peer stops reading that READ's bytes.

// flush writes the batch with one writev and drops the regions' references.
// A batch with READ payloads must leave within FrameTimeout, and sooner if
// one of its regions is revoked or released meanwhile (cut) while that
// READ's bytes are still to go. A READ whose region was cut before the
// write began (refuseCutLocked) is answered with the cut's code and no payload;
// the rest of the batch goes out as it is. A batch whose READ payloads
// are all small enough to be copied goes by flushCopied instead.
func (s *serverConn) flush() error {
	if h := testHookFlush.Load(); h != nil {
		(*h)(s)
	}
	if s.payload > 0 && s.copiesAll() {
		return s.flushCopied()
	}
	timed := s.payload > 0
	var err error
	var deadline time.Time
	if timed {
		deadline = time.Now().Add(s.b.cfg.FrameTimeout)
		var drop []memreg.Ref
		s.mu.Lock()
		s.flushing = true
		err = s.c.SetWriteDeadline(deadline)
		if err == nil {
			drop = s.refuseCutLocked()
		}
		s.mu.Unlock()
		releaseAll(drop)
	}
	if err == nil {
		s.gather()
		if h := testHookGathered.Load(); h != nil {
			(*h)(s)
		}
		s.publishServed()
		err = s.writeBatch(deadline)
		if h := testHookWritten.Load(); h != nil {
			(*h)(s)
		}
	}
	if timed {
		err = s.endTimedWrite(err)
	}
	if err == nil {
		for _, g := range s.segs {
			if mem := g.ref.Bytes(); mem != nil {
				s.servedOut(uint64(len(mem)), g.first)
			}
		}
		s.publishServed()
	}
	s.release()
	return err
}

// copiesAll reports whether gather will copy every READ payload of the
// batch into the stage (each at most stageCopyMax bytes, and all of them
// with the headers within stageCopyBudget).
func (s *serverConn) copiesAll() bool {
	if len(s.out)+s.payload > stageCopyBudget {
		return false
	}
	for i := range s.segs {
		if s.segs[i].n > stageCopyMax {
			return false
		}
	}
	return true
}

// flushCopied is flush for a batch whose READ payloads gather copies
// (copiesAll): a READ whose region was cut before the copy is answered
// as flush answers it (refuseCutLocked), the others' bytes are copied
// while their references hold, and the references go before the write,
// which then touches no region: it is written as a batch of answers
// alone is, without a deadline (a revocation no longer waits on it), and
// saves the deadline's set and clear. A cut after the copy finds nothing
// of the batch to wait for; the bytes it sends were read while remote
// access held, as a writev's are.
func (s *serverConn) flushCopied() error {
	s.mu.Lock()
	drop := s.refuseCutLocked()
	s.mu.Unlock()
	releaseAll(drop)
	s.gather()
	for i := range s.segs {
		s.segs[i].ref.Release() // copied: g.n still counts its bytes
		s.segs[i].ref = memreg.Ref{}
	}
	if h := testHookGathered.Load(); h != nil {
		(*h)(s)
	}
	s.publishServed()
	err := s.writeBatch(time.Time{})
	if h := testHookWritten.Load(); h != nil {
		(*h)(s)
	}
	if err == nil {
		for _, g := range s.segs {
			if g.n > 0 {
				s.servedOut(uint64(g.n), g.first)
			}
		}
		s.publishServed()
	}
	s.release()
	return err
}

// gather builds the batch's iov: the headers, and each READ's payload
// from its region in place, except that a payload of at most stageCopyMax
// bytes is copied, with the headers before it, into the stage while
// stageCopyBudget lasts, so a run of small answers is one buffer of the
// writev (client.go says why). The stream's bytes are the same either
// way.
func (s *serverConn) gather() {
	s.iov = s.iovBuf[:0]
	st := s.stage[:0]
	start, open := 0, 0
	for _, g := range s.segs {
		mem := g.ref.Bytes()
		if mem == nil {
			continue
		}
		hdrs := s.out[start:g.hdrEnd]
		if len(mem) <= stageCopyMax && len(st)+len(hdrs)+len(mem) <= stageCopyBudget {
			if st == nil {
				s.stage = make([]byte, 0, stageCopyBudget)
				st = s.stage
			}
			st = append(append(st, hdrs...), mem...) // within cap: st never moves
		} else {
			if open < len(st) {
				s.iov = append(s.iov, st[open:len(st):len(st)])
				open = len(st)
			}
			s.iov = append(s.iov, hdrs, mem)
		}
		start = g.hdrEnd
	}
	if open < len(st) {
		s.iov = append(s.iov, st[open:len(st):len(st)])
	}
	if start < len(s.out) {
		s.iov = append(s.iov, s.out[start:])
	}
	s.iovBuf = s.iov[:0]
}

// testHookFlush, when set by a test, runs as a batch's flush begins;
// testHookGathered once its iov is built, before the write;
// testHookWritten once it is written.
var testHookFlush, testHookGathered, testHookWritten atomic.Pointer[func(*serverConn)]

// writeBatch writes s.iov. A write cut short by a cut's grace goes on
// while the peer took every cut READ's bytes (cutLeft).
func (s *serverConn) writeBatch(deadline time.Time) error {
	sent := 0
	for {
		n, err := writeIOV(s.c, &s.iov)
		sent += int(n)
		if err == nil || !isTimeout(err) || !s.cutLeft(sent, deadline) {
			return err
		}
	}
}

// cutLeft is called when the batch's write timed out with sent of its
// bytes out. If a cut shortened the deadline and the bytes of every READ
// cut meanwhile are out, the peer is reading: the write goes on under the
// batch's own deadline (true), and those READs' references go now (a
// revocation waits no longer for the rest of the batch). It reports false
// when the peer still holds back a cut region's bytes, or the batch's own
// deadline passed: the connection ends.
func (s *serverConn) cutLeft(sent int, deadline time.Time) bool {
	var drop []memreg.Ref
	s.mu.Lock()
	ok := s.cutEnd > 0 && sent >= s.cutEnd && time.Now().Before(deadline)
	if ok {
		s.cutEnd = 0
		ok = s.c.SetWriteDeadline(deadline) == nil
	}
	if ok {
		pay := 0
		for i := range s.segs {
			g := &s.segs[i]
			pay += g.n
			if g.hdrEnd+pay > sent {
				break // still (partly) to go: the iov holds its memory
			}
			if !g.ref.Held() {
				continue // no payload, or let go already
			}
			if e := s.b.reg.RemoteErr(g.ref.Region()); e != nil && e != rdmamgr.ErrExpired {
				s.servedOut(uint64(g.n), g.first)
				drop = append(drop, g.ref)
				g.ref = memreg.Ref{} // g.n stays: its bytes are in the stream
			}
		}
	}
	s.mu.Unlock()
	releaseAll(drop)
	return ok
}

// releaseAll releases refs (outside mu: a release may wake a revocation).
func releaseAll(refs []memreg.Ref) {
	for _, ref := range refs {
		ref.Release()
	}
}

// refuseCutLocked answers, in place, every READ of the batch whose region
// was revoked or released (or whose proxy's owner went) before the write
// began: its header says the cut's code and no payload, and its
// reference is returned, for the caller to release once it let go of mu.
// It runs under mu with flushing just set, so every cut comes either
// before it (answered here) or after it (cut shortens the write deadline
// and counts the payload that is really in the stream). Its neighbours in
// the batch are answered as they were: one region's end fails no other
// operation, and the connection serves on.
func (s *serverConn) refuseCutLocked() []memreg.Ref {
	var drop []memreg.Ref
	for i := range s.segs {
		g := &s.segs[i]
		if !g.ref.Held() {
			continue
		}
		e := s.b.reg.RemoteErr(g.ref.Region())
		if e == nil || e == rdmamgr.ErrExpired {
			continue
		}
		hdr := s.out[g.hdrEnd-respHeaderSize : g.hdrEnd]
		hdr[1] = byte(backend.RemoteCode(e))
		binary.LittleEndian.PutUint32(hdr[4:], 0) // no payload
		s.payload -= g.n
		drop = append(drop, g.ref)
		g.ref, g.n = memreg.Ref{}, 0
		s.rejected()
	}
	return drop
}

// answerFirst is a served connection's source of bytes: before each read
// from the socket, which may wait on the peer, a batch that holds READ
// references goes out. So no READ's reference on its region (which a
// revocation or release waits for) waits on the peer's next bytes: the
// rest of a header, a payload, a trailer, a refused payload drained, as
// write already had it for a WRITE's payload. Answers without a payload
// may wait for bytes on their way (they go out together: a send saved).
type answerFirst struct{ s *serverConn }

func (a answerFirst) Read(p []byte) (int, error) {
	if a.s.payload > 0 {
		if err := a.s.flush(); err != nil {
			// %v: the write's deadline is not the read's (readHeader
			// takes a read deadline for a wake-up).
			return 0, fmt.Errorf("tcp: answers before a read: %v", err)
		}
	}
	return a.s.c.Read(p)
}
