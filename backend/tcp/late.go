package tcp

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/coarseclock"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Late answers: a host agent's inbox (agentapi.AsyncInbox, AsyncLanding)
// answers a write-imm's event or a send's message once its process did,
// while the connection serves its next frames: a process that is slow to
// answer (or never does) holds up its own notices, not every process's
// traffic on the connection between two agents. The answer is queued
// here by whichever goroutine gives it and sent by the connection's
// goroutine in its next batch; one waiting for a request header is woken
// for it (a read deadline in the past, only while it waits for a header).
// Answers are matched by wrid, so one may overtake another.

// lateAnswers is a connection's answers given later.
type lateAnswers struct {
	// n counts the answers deferred and not yet in a batch: the serve
	// loop looks further only when it is not 0.
	n atomic.Int64

	mu     sync.Mutex // guards the fields below
	resps  []respHeader
	idle   bool // the serve goroutine waits for a header: wake it
	woke   bool // it was woken (its read deadline is in the past)
	closed bool // the connection ended: answers are dropped
}

// deferAnswer counts an answer to come and returns the function that gives it.
func (s *serverConn) deferAnswer(op byte, wrid uint64) func(error) {
	s.late.n.Add(1)
	var once sync.Once
	return func(err error) {
		once.Do(func() {
			l := &s.late
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.closed {
				return
			}
			l.resps = append(l.resps, respHeader{op: op, code: byte(backend.Code(err)), wrid: wrid})
			if l.idle && !l.woke {
				l.woke = true
				_ = s.c.SetReadDeadline(aLongTimeAgo)
			}
		})
	}
}

// undefer takes back a deferAnswer whose answer will not come (the inbox
// refused at once).
func (s *serverConn) undefer() { s.late.n.Add(-1) }

// takeLate adds the answers given since to the batch.
func (s *serverConn) takeLate() {
	if s.late.n.Load() == 0 {
		return
	}
	l := &s.late
	l.mu.Lock()
	for _, r := range l.resps {
		s.appendResp(r, memreg.Ref{})
	}
	l.n.Add(-int64(len(l.resps)))
	clear(l.resps)
	l.resps = l.resps[:0]
	l.mu.Unlock()
}

// closeLate drops the answers still to come (the connection ended).
func (s *serverConn) closeLate() {
	s.late.mu.Lock()
	s.late.closed = true
	s.late.resps = nil
	s.late.mu.Unlock()
}

// readHeader reads a request's fixed header into hdr, waiting at most
// IdleTimeout for the peer; while answers are still to come it can be
// woken to send those that came (and then reads on).
func (s *serverConn) readHeader(br *connReader, hdr []byte) error {
	got := 0
	for {
		if br.Buffered() < reqMaxSize {
			// Reading the header may wait on the peer: a peer pings an
			// idle connection every heartbeat, so one silent for
			// IdleTimeout is gone or hostile, and gives its slot back.
			// (Payload reads set deadlines of their own.)
			if err := s.idleDeadline(); err != nil {
				return err
			}
		}
		wakeable := false
		if s.late.n.Load() != 0 && br.Buffered() < len(hdr)-got {
			if !s.lateIdle() { // answers came: send them first
				s.takeLate()
				if err := s.flush(); err != nil {
					return err
				}
				continue
			}
			wakeable = true
		}
		k, err := br.ReadFull(hdr[got:])
		got += k
		woke := wakeable && s.lateBusy()
		if err == nil {
			return nil
		}
		if !woke || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		s.takeLate()
		if len(s.segs) > 0 {
			if err := s.flush(); err != nil {
				return err
			}
		}
	}
}

// idleDeadline makes sure the socket's read deadline is an idle one:
// IdleTimeout, and at most IdleTimeout/8 + 1 ms more, after now. It is
// set again only when the one set last (at s.idleAt, on the coarse clock)
// is older than the slack: a connection that sends a request every few
// microseconds no longer reads the clock and moves the socket's timer
// for each one (a time.Now and a SetReadDeadline: about half a
// microsecond). Anything else that sets the read deadline (a payload's
// read, a late answer's wake) clears s.idleAt (serve, lateBusy).
func (s *serverConn) idleDeadline() error {
	idle := s.b.cfg.IdleTimeout
	slack := int64(idle / 16)
	m := coarseclock.Mono()
	if s.idleAt != 0 && m-s.idleAt < slack {
		return nil
	}
	// Set to IdleTimeout + 2 slack + the coarse clock's resolution: a
	// peer silent for IdleTimeout since its last header is not cut off
	// sooner as long as the coarse clock lags the real one by less than
	// slack + 1 ms (it ticks every millisecond).
	if err := s.c.SetReadDeadline(time.Now().Add(idle + 2*time.Duration(slack) + coarseclock.Resolution)); err != nil {
		s.idleAt = 0
		return err
	}
	s.idleAt = m
	return nil
}

// keepsIdleDeadline reports whether serving a frame of op leaves the read
// deadline that readHeader set: a READ, a ping and an atomic read nothing
// more from the socket; every other frame reads a payload under a
// deadline of its own.
func keepsIdleDeadline(op byte) bool {
	return op == opRead || op == opPing || op == opCompareSwap || op == opFetchAdd
}

// lateIdle marks the serve goroutine as waiting for a header, unless
// answers are there to send (false).
func (s *serverConn) lateIdle() bool {
	l := &s.late
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.resps) > 0 {
		return false
	}
	l.idle = true
	return true
}

// lateBusy ends lateIdle and reports whether the goroutine was woken; if
// so, the idle deadline is back (no later read meets the wake's).
func (s *serverConn) lateBusy() bool {
	l := &s.late
	l.mu.Lock()
	woke := l.woke
	l.idle, l.woke = false, false
	l.mu.Unlock()
	if woke {
		s.idleAt = 0 // readHeader sets the idle deadline again
		_ = s.c.SetReadDeadline(time.Now().Add(s.b.cfg.IdleTimeout))
	}
	return woke
}

// readFull is io.ReadFull on br.
func readFull(br *connReader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := br.Read(p[n:])
		n += k
		if err != nil {
			if n == len(p) {
				return n, nil
			}
			return n, err
		}
	}
	return n, nil
}

// eventLate hands a write-imm's event for an attached process to its
// inbox when that answers later (agentapi.AsyncInbox): deferred, the
// answer goes out once the inbox gives it. Not deferred: err is the
// answer now (the inbox's refusal, or its synchronous Event's).
func (s *serverConn) eventLate(h *reqHeader, ev backend.Event) (deferred bool, err error) {
	if h.via == 0 && h.origin == 0 {
		return false, s.b.event(ev)
	}
	in, err := s.inboxOf(h)
	if err != nil {
		return false, err
	}
	ev.Peer = s.noticePeer(h)
	ai, ok := in.(agentapi.AsyncInbox)
	if !ok {
		return false, in.Event(ev)
	}
	answer := s.deferAnswer(h.op, h.wrid)
	if err := ai.EventAsync(ev, answer); err != nil {
		s.undefer()
		return false, err
	}
	return true, nil
}
