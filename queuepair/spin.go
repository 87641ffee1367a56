package queuepair

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Waiters spin a little before they park while the outcome they wait for
// is on its way (an operation in flight). Parking costs a wake-up when the
// outcome comes: with goroutines on several cores, the completing
// goroutine's runtime wakes another thread (a futex wake), which costs
// tens of microseconds on a virtual machine, whose halted CPU is woken by
// an interrupt through the hypervisor; a waiter still spinning sees the
// outcome without one, and the completing goroutine wakes nobody.
//
// The spin adapts: spinFor bounds one spin, and a spin that ran out
// without the outcome (the answers take longer than that, or the machine
// is busy and the spinner only takes a CPU the peer needs) makes the next
// waits park at once, twice as many each time up to spinBackoffMax; one
// that saw its outcome spins again next time. A spin yields the
// processor at each round, and none is done with GOMAXPROCS 1, where the
// goroutine that completes the work needs this processor (and a yield
// would starve the network poller, which the scheduler consults only when
// nothing else is runnable).
const (
	spinFor        = 50 * time.Microsecond
	spinBackoffMax = 256
)

var (
	spinSkip  atomic.Int32 // waits left to park at once
	spinMissN atomic.Int32 // waits to skip after the next miss: doubled per miss, 0 after a hit
	// spinProcs caches GOMAXPROCS (runtime.GOMAXPROCS takes the
	// scheduler's lock), read again every 4096 spins.
	spinProcs atomic.Int32
	spinN     atomic.Uint32
)

// procs returns GOMAXPROCS as last read.
func procs() int32 {
	if spinN.Add(1)&4095 == 1 {
		spinProcs.Store(int32(runtime.GOMAXPROCS(0)))
	}
	return spinProcs.Load()
}

// spinner is one waiter's spin; its zero value starts one.
type spinner struct {
	rounds int
	start  time.Time
	off    bool // this wait does not spin (backing off, or GOMAXPROCS 1)
}

// more yields the processor once and reports whether the waiter may look
// again (true) or should park (false: the spin ran out, or this wait does
// not spin). The clock is read every 16 rounds.
func (s *spinner) more() bool {
	if s.off {
		return false
	}
	if s.rounds == 0 {
		if spinSkip.Load() > 0 {
			spinSkip.Add(-1)
			s.off = true
			return false
		}
		if procs() < 2 {
			s.off = true
			return false
		}
	}
	if s.rounds&15 == 0 {
		now := time.Now()
		if s.start.IsZero() {
			s.start = now
		} else if now.Sub(s.start) > spinFor {
			s.off = true
			n := min(max(2*spinMissN.Load(), 1), spinBackoffMax)
			spinMissN.Store(n)
			spinSkip.Store(n)
			return false
		}
	}
	s.rounds++
	runtime.Gosched()
	return true
}

// hit records that the wait saw its outcome while spinning.
func (s *spinner) hit() {
	if s.rounds > 0 && !s.off {
		spinMissN.Store(0)
	}
}
