package tcp

import (
	"net"
	"time"
)

// setTokenTTL changes the lifetime of tokens handed out by later
// AcceptRoute calls (AcceptRoute reads it under b.mu).
func (b *Backend) setTokenTTL(d time.Duration) {
	b.mu.Lock()
	b.cfg.TokenTTL = d
	b.mu.Unlock()
}

// serveListener starts b's accept loop on ln instead of a listener of its
// own (a fake that fails Accept on purpose).
func (b *Backend) serveListener(ln net.Listener) error { return b.serve(ln) }

// stalledIn reports whether a served connection is waiting on a payload
// for region r (a WRITE being read, or a batch being written).
func (b *Backend) stalledIn(r uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.srv {
		s.mu.Lock()
		hit := (s.writing != nil && s.writing.ID() == r) || s.flushing
		s.mu.Unlock()
		if hit {
			return true
		}
	}
	return false
}

// drivenOps is the number of operations their own waiters read (drove).
func (r *route) drivenOps() uint64 {
	var n uint64
	for _, cc := range r.conns {
		cc.mu.Lock()
		n += cc.drove
		cc.mu.Unlock()
	}
	return n
}
