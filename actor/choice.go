package actor

import (
	"errors"
	"strings"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Choice is one place in a manager's order of preference for new routes:
// a started backend, or a backend the assembler left out (not built here,
// no usable device) and why. Left-out backends serve nothing; a route's
// reason (status, "route up" log) names them where they would have come.
type Choice struct {
	// Backend is the started backend; nil for one left out.
	Backend backend.Backend
	// Kind and Err name a left-out backend and why it is out.
	Kind backend.Kind
	Err  error
}

// Route reasons when no backend was passed over.
const (
	whyFirst = "first choice"
	whyOnly  = "only backend"
	whyPeer  = "the peer's choice"
)

// reasonOf is one entry of a route's reason: why kind was passed over.
// The kind is said once, also when err's text starts with it already
// ("ibverbs: no RDMA devices").
func reasonOf(kind backend.Kind, err error) string {
	msg := err.Error()
	var se *setupError
	if errors.As(err, &se) {
		msg = se.cause.Error()
		if se.byPeer {
			msg = "refused by the peer: " + msg
		}
	}
	for strings.HasPrefix(msg, string(kind)+": ") {
		msg = strings.TrimPrefix(msg, string(kind)+": ")
	}
	return string(kind) + ": " + msg
}

// whyOf is the reason of a route from the backends passed over before it
// (in order); without any, it was the first choice of choices.
func whyOf(passed []string, choices int) string {
	switch {
	case len(passed) > 0:
		return strings.Join(passed, "; ")
	case choices <= 1:
		return whyOnly
	}
	return whyFirst
}

// setupError is a failed try of one backend during a route setup: what
// was tried (the caller's error says it) and the cause (the route's reason
// says only that).
type setupError struct {
	what   string // "prepare shm route to ADDR/NAME"
	cause  error
	byPeer bool // the peer refused the handshake
}

func (e *setupError) Error() string { return e.what + ": " + e.cause.Error() }
func (e *setupError) Unwrap() error { return e.cause }

// Bounds of the refusals kept for inbound routes' reasons.
const (
	maxRefusedPeers   = 1024
	maxRefusedReasons = 4
	maxReasonLen      = 256
)

// refusedNote is what we refused one initiator lately: the handshakes for
// backends we do not run (or that refused it), in order.
type refusedNote struct {
	at      time.Time
	reasons []string
}

// noteRefused remembers, for the reason of the initiator's next inbound
// route, that we refused its handshake for kind with err (authenticated
// handshakes only). Bounded: entries older than RouteTimeout are dropped
// when the table is full, and past the bound nothing is kept.
func (m *Manager) noteRefused(initiator uint64, kind backend.Kind, err error) {
	now := time.Now()
	m.ops.mu.Lock()
	defer m.ops.mu.Unlock()
	if m.ops.refused == nil {
		m.ops.refused = make(map[uint64]*refusedNote)
	}
	n := m.ops.refused[initiator]
	if n == nil {
		if len(m.ops.refused) >= maxRefusedPeers {
			for id, old := range m.ops.refused {
				if now.Sub(old.at) > m.cfg.RouteTimeout {
					delete(m.ops.refused, id)
				}
			}
			if len(m.ops.refused) >= maxRefusedPeers {
				return
			}
		}
		n = &refusedNote{}
		m.ops.refused[initiator] = n
	}
	n.at = now
	if len(n.reasons) < maxRefusedReasons {
		r := "we refused " + reasonOf(kind, err)
		if len(r) > maxReasonLen { // the kind is the peer's text
			r = strings.ToValidUTF8(r[:maxReasonLen], "") + "…"
		}
		n.reasons = append(n.reasons, r)
	}
}

// inboundWhyLocked is the reason of an inbound route from initiator, and
// forgets its refusals. Called with m.ops.mu held.
func (m *Manager) inboundWhyLocked(initiator uint64) string {
	n := m.ops.refused[initiator]
	delete(m.ops.refused, initiator)
	if n == nil || time.Since(n.at) > m.cfg.RouteTimeout {
		return whyPeer
	}
	return whyPeer + "; " + strings.Join(n.reasons, "; ")
}
