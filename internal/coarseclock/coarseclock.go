// Package coarseclock is a clock for deadlines that costs an atomic load to
// read: a ticker goroutine refreshes it every Resolution while somebody
// holds it and reads it.
//
// Holders call Acquire, and Release when they are done; Release of the
// last holder stops the ticker and waits for it to exit, so the goroutine
// always has an owner that waits for it. While nobody reads the clock for
// IdleAfter the ticker exits on its own (a holder that is never released
// costs no goroutine once idle); the next Now of a holder starts it again.
// Now with no ticker running reads time.Now.
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
)

// Resolution is how often the ticker refreshes the clock.
const Resolution = time.Millisecond

// IdleAfter is how long the ticker runs with no Now call before it exits.
const IdleAfter = 250 * time.Millisecond

var (
	base = time.Now() // carries the monotonic reading every Now adds to

	mu      sync.Mutex
	refs    int
	stop    chan struct{} // closed to stop the running ticker
	done    chan struct{} // closed when the last ticker exited
	holders atomic.Int32  // refs, readable without mu

	running atomic.Bool  // the ticker refreshes off
	off     atomic.Int64 // time.Since(base) at the last refresh
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

// Now returns the coarse time (with a monotonic reading).
func Now() time.Time {
	if running.Load() {
		if !used.Load() { // a write only once per tick: the line stays shared
			used.Store(true)
		}
		return base.Add(time.Duration(off.Load()))
	}
	return slow()
}

// Deadline is Now plus d plus Resolution: d from the real now, give or
// take a few milliseconds.
func Deadline(d time.Duration) time.Time { return Now().Add(d + Resolution) }

// slow reads the real clock and starts the ticker if a holder wants it.
func slow() time.Time {
	now := time.Now()
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
	off.Store(int64(now.Sub(base)))
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
			off.Store(int64(time.Since(base)))
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
