// Package logsample bounds log lines about what peers do: a Sampler lets
// one line through per second and counts the ones it held back, so a
// flood of refusals cannot become a flood of log lines. The data planes
// (tcp, shm) share it; they may not import each other.
package logsample

import (
	"sync/atomic"
	"time"
)

// Sampler lets one log line through per second and counts the rest. Its
// zero value is ready; it is safe for concurrent use.
type Sampler struct {
	next    atomic.Int64 // unix nanoseconds before which lines are dropped
	dropped atomic.Uint64
}

// Allow reports whether a line may be logged now, and how many were
// dropped since the last one.
func (s *Sampler) Allow() (bool, uint64) {
	now := time.Now().UnixNano()
	next := s.next.Load()
	if now < next || !s.next.CompareAndSwap(next, now+int64(time.Second)) {
		s.dropped.Add(1)
		return false, 0
	}
	return true, s.dropped.Swap(0)
}
