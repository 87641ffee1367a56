package ibverbs

import (
	"sync"
	"time"
)

// wsem is a FIFO weighted semaphore: acquire(n) takes n units at once or
// waits, so two posters each needing several work-request slots never hold
// part of what they need while waiting for the rest (no deadlock between
// them), and a large request is not starved by small ones.
type wsem struct {
	mu      sync.Mutex
	avail   int
	size    int
	waiters []*semWaiter // FIFO
}

type semWaiter struct {
	n     int
	ready chan struct{} // closed when the units were granted
}

func newWsem(n int) *wsem { return &wsem{avail: n, size: n} }

// tryAcquire takes n units if they are free and nobody waits.
func (s *wsem) tryAcquire(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) == 0 && s.avail >= n {
		s.avail -= n
		return true
	}
	return false
}

// semTimeout and semDone tell why acquire gave up.
const (
	semOK = iota
	semTimeout
	semDone
	semCanceled
)

// acquire takes n units (n <= size), waiting until they are free, the
// deadline passes (zero: none), done is closed, or cancel (the poster's
// context; nil: none) is closed.
func (s *wsem) acquire(n int, deadline time.Time, done, cancel <-chan struct{}) int {
	s.mu.Lock()
	if len(s.waiters) == 0 && s.avail >= n {
		s.avail -= n
		s.mu.Unlock()
		return semOK
	}
	w := &semWaiter{n: n, ready: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()

	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	why := semOK
	select {
	case <-w.ready:
		return semOK
	case <-timeout:
		why = semTimeout
	case <-done:
		why = semDone
	case <-cancel:
		why = semCanceled
	}
	s.mu.Lock()
	select {
	case <-w.ready:
		// Granted meanwhile: we own the units, give them back.
		s.mu.Unlock()
		s.release(n)
		return why
	default:
	}
	for i, o := range s.waiters {
		if o == w {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			break
		}
	}
	// Our leaving may let the waiters behind us through.
	s.grantLocked()
	s.mu.Unlock()
	return why
}

// release returns n units.
func (s *wsem) release(n int) {
	s.mu.Lock()
	s.avail += n
	s.grantLocked()
	s.mu.Unlock()
}

func (s *wsem) grantLocked() {
	for len(s.waiters) > 0 && s.avail >= s.waiters[0].n {
		w := s.waiters[0]
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
		s.avail -= w.n
		close(w.ready)
	}
}

// inUse returns the units taken.
func (s *wsem) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size - s.avail
}
