package tcp

import (
	"sync/atomic"
)

// inflightSem bounds the chunks in flight on a route: an atomic count, so
// that taking and giving back room costs no channel operation; a poster
// that finds no room waits on room, which a release signals only while
// someone waits.
type inflightSem struct {
	n       atomic.Int64
	max     int64
	waiters atomic.Int32
	room    chan struct{} // one wake-up at a time; a woken waiter passes it on
}

func newInflightSem(max int) *inflightSem {
	return &inflightSem{max: int64(max), room: make(chan struct{}, 1)}
}

// tryTake takes k units of room if there are, and reports whether it did.
func (s *inflightSem) tryTake(k int64) bool {
	for {
		cur := s.n.Load()
		if cur+k > s.max {
			return false
		}
		if s.n.CompareAndSwap(cur, cur+k) {
			return true
		}
	}
}

// release gives back k units and wakes a waiter, if any.
func (s *inflightSem) release(k int64) {
	s.n.Add(-k)
	if s.waiters.Load() > 0 {
		s.wake()
	}
}

func (s *inflightSem) wake() {
	select {
	case s.room <- struct{}{}:
	default:
	}
}
