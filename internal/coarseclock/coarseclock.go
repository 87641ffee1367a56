// Package coarseclock is a clock for deadlines that costs an atomic load to
// read: a ticker goroutine refreshes it every Resolution while somebody
// holds it and reads it.
//
// Holders call Acquire, and Release when they are done; Release of the
// last holder stops the ticker and waits for it to exit, so the goroutine
// always has an owner that waits for it. While nobody reads the clock for
// IdleAfter the ticker exits on its own (a holder that is never released
// costs no goroutine once idle); the next Now of a holder starts it again.
// Now with no ticker running reads the real clock.
//
// Mono is the same clock as CLOCK_MONOTONIC nanoseconds (runtime.nanotime:
// on Linux the same clock in every process of the host, unlike time.Time's
// per-process monotonic reading), for deadlines shared with another
// process (the shm backend's leases); Now is Mono as a time.Time.
//
// Now lags the real time by up to Resolution plus however late the
// runtime runs the ticker (a few milliseconds on a loaded machine); it
// never runs ahead. Deadline adds Resolution, so a deadline built from it
// is within a few milliseconds of the exact one (late by up to
// Resolution, early only by the ticker's scheduling delay).
package coarseclock

import (
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname
)

// Resolution is how often the ticker refreshes the clock.
const Resolution = time.Millisecond

// IdleAfter is how long the ticker runs with no Now call before it exits.
const IdleAfter = 250 * time.Millisecond

// nanotime is the runtime's monotonic clock (CLOCK_MONOTONIC on Linux).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

var (
	// base carries the monotonic reading every Now adds to; baseMono,
	// read just after it, is nanotime then (Now never runs ahead).
	base     = time.Now()
	baseMono = nanotime()

	mu      sync.Mutex
	refs    int
	stop    chan struct{} // closed to stop the running ticker
	done    chan struct{} // closed when the last ticker exited
	holders atomic.Int32  // refs, readable without mu

	running atomic.Bool  // the ticker refreshes mono
	mono    atomic.Int64 // nanotime at the last refresh
	used    atomic.Bool  // Now was called since the last tick
)

// Acquire registers a holder; the ticker starts at its first Now.
func Acquire() {
	mu.Lock()
	refs++
	holders.Store(int32(refs))
	mu.Unlock()
}

// Release drops a holder; the last one stops the ticker and waits for it.
func Release() {
	mu.Lock()
	if refs == 0 {
		mu.Unlock()
		panic("coarseclock: Release without Acquire")
	}
	refs--
	holders.Store(int32(refs))
	if refs > 0 {
		mu.Unlock()
		return
	}
	d := done
	if stop != nil {
		close(stop)
		stop = nil
	}
	mu.Unlock()
	if d != nil {
		<-d
	}
}

// Exact reads CLOCK_MONOTONIC itself: Mono's clock, not coarse, for the
// rare check that must be exact where Mono is near a limit.
func Exact() int64 { return nanotime() }

// Now returns the coarse time (with a monotonic reading).
func Now() time.Time { return base.Add(time.Duration(Mono() - baseMono)) }

// Mono returns the coarse reading of CLOCK_MONOTONIC in nanoseconds (see
// the package doc): the clock Now reads, as another process reads it.
func Mono() int64 {
	if running.Load() {
		if !used.Load() { // a write only once per tick: the line stays shared
			used.Store(true)
		}
		return mono.Load()
	}
	return slow()
}

// Deadline is Now plus d plus Resolution: d from the real now, give or
// take a few milliseconds.
func Deadline(d time.Duration) time.Time { return DeadlineAt(Mono(), d) }

// DeadlineAt is Deadline as of the reading mono of Mono: a caller that
// posts many operations within one tick reads Mono, and builds the
// deadline (a time.Time's Add, several times Mono's cost) only when the
// reading changed.
func DeadlineAt(mono int64, d time.Duration) time.Time {
	return base.Add(time.Duration(mono-baseMono) + d + Resolution) // one Add: it is per operation
}

// slow reads the real clock and starts the ticker if a holder wants it.
func slow() int64 {
	now := nanotime()
	if holders.Load() == 0 {
		return now
	}
	mu.Lock()
	defer mu.Unlock()
	if refs == 0 || running.Load() {
		return now
	}
	if done != nil {
		<-done // the previous ticker is exiting (it needs no lock to)
	}
	mono.Store(now)
	used.Store(true)
	stop, done = make(chan struct{}), make(chan struct{})
	running.Store(true)
	go tick(stop, done)
	return now
}

// tick refreshes the clock until stop is closed or nobody read it for
// IdleAfter.
func tick(stopc, donec chan struct{}) {
	defer close(donec)
	t := time.NewTicker(Resolution)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-stopc:
			running.Store(false)
			return
		case <-t.C:
			mono.Store(nanotime())
			if used.Load() {
				used.Store(false)
				idle = 0
				continue
			}
			if idle++; time.Duration(idle)*Resolution < IdleAfter {
				continue
			}
			mu.Lock()
			select {
			case <-stopc: // Release got here first: it waits for donec
			default:
				stop = nil // a later start makes its own; done stays for it to wait on
			}
			running.Store(false)
			mu.Unlock()
			return
		}
	}
}
