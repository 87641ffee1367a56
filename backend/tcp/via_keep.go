package tcp

import (
	"sync"
	"time"
)

// A Resolve may wait (the first use of a region maps it from its process,
// which shm bounds at 5 s, agentapi.ResolveTimeout at 7), and while it
// does, the connection's goroutine reads and answers nothing: the pings
// of the initiator's heartbeat included, whose route fails once a
// connection stayed silent for its PeerTimeout (4 s by default). One stuck
// process would so fail every operation on the route, every other
// process's too. So while a Resolve runs, the connection says it is alive:
// every HeartbeatInterval, a ping answer (the initiator takes any as
// heard, unasked ones included: it matches a ping answer to nothing).

// keepAlive writes ping answers on a connection while its goroutine waits
// in a Resolve. Its timer is made once per connection and re-armed for
// each Resolve (no allocation per frame).
type keepAlive struct {
	mu  sync.Mutex // held while a ping answer is written; guards the fields below
	on  bool       // a Resolve runs
	t   *time.Timer
	err error // a ping answer's write failed: the stream is out of step
}

// resolveStart arms s's keep-alive before a Resolve.
func (s *serverConn) resolveStart() {
	k := &s.keep
	k.mu.Lock()
	k.on = true
	if k.t == nil {
		k.t = time.AfterFunc(s.b.cfg.HeartbeatInterval, func() { s.keepPing() })
	} else {
		k.t.Reset(s.b.cfg.HeartbeatInterval)
	}
	k.mu.Unlock()
}

// resolveEnd disarms it once the Resolve returned: when it returns, no
// ping answer is being written, and none will be until the next
// resolveStart. It returns a ping answer's write error, the connection's.
func (s *serverConn) resolveEnd() error {
	k := &s.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	k.on = false
	k.t.Stop()
	return k.err
}

// keepPing writes one ping answer if a Resolve still runs, and re-arms.
func (s *serverConn) keepPing() {
	k := &s.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.on || k.err != nil {
		return
	}
	var b [respHeaderSize]byte
	h := respHeader{op: opPing}
	h.encode(b[:])
	// Nothing else writes now (the batch was flushed before the Resolve),
	// so the deadline is ours; a peer that does not read is cut off.
	err := s.c.SetWriteDeadline(time.Now().Add(s.b.cfg.HeartbeatInterval))
	if err == nil {
		_, err = s.c.Write(b[:])
	}
	if derr := s.c.SetWriteDeadline(time.Time{}); err == nil {
		err = derr
	}
	if err != nil {
		k.err = err
		return
	}
	k.t.Reset(s.b.cfg.HeartbeatInterval)
}

// endKeep stops the timer for good (the connection ends).
func (s *serverConn) endKeep() {
	k := &s.keep
	k.mu.Lock()
	k.on = false
	if k.t != nil {
		k.t.Stop()
	}
	k.mu.Unlock()
}
