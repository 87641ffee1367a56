//go:build linux

package shm

import (
	"sync"
	"sync/atomic"
	"time"
)

// coarseTick is how often the coarse clock reads CLOCK_MONOTONIC while
// copies use it, and coarseIdle how many ticks without a reader stop it.
const (
	coarseTick = time.Millisecond
	coarseIdle = 100
)

// coarseClock is CLOCK_MONOTONIC (nanotime) read once a tick by a
// goroutine of its own, for the lease check of every copy: a clock read
// costs more than a small copy (20 ns on a bare host, 70-200 ns in a
// loaded VM). The goroutine runs only while copies ask (it stops after
// coarseIdle ticks without one; the next reader starts it again) and until
// close. A reading is at most about a tick old, so a copy may pass that
// long after its region's lease ended; the manager's reaper, which ends
// access through the kernel, acts within its interval anyway.
type coarseClock struct {
	now     atomic.Int64
	asked   atomic.Bool // a reader came since the last tick
	running atomic.Bool

	mu     sync.Mutex // guards closed and starting the goroutine
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

// read returns CLOCK_MONOTONIC in ns, at most about a tick old.
func (c *coarseClock) read() int64 {
	if !c.asked.Load() {
		c.asked.Store(true)
	}
	if c.running.Load() {
		return c.now.Load()
	}
	return c.start()
}

// start starts the ticking goroutine (unless closed) and returns a fresh
// reading.
func (c *coarseClock) start() int64 {
	now := nanotime()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.running.Load() {
		return now
	}
	if c.stop == nil {
		c.stop = make(chan struct{})
	}
	c.now.Store(now)
	c.running.Store(true)
	c.wg.Add(1)
	go c.tick()
	return now
}

func (c *coarseClock) tick() {
	defer c.wg.Done()
	t := time.NewTicker(coarseTick)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-t.C:
		case <-c.stop:
			c.running.Store(false)
			return
		}
		c.now.Store(nanotime())
		if c.asked.Swap(false) {
			idle = 0
			continue
		}
		if idle++; idle >= coarseIdle {
			c.mu.Lock()
			c.running.Store(false) // under mu: start sees it stopped or running
			c.mu.Unlock()
			return
		}
	}
}

// close stops the goroutine and waits for it; readers then read the
// clock themselves. Idempotent.
func (c *coarseClock) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		if c.stop != nil {
			close(c.stop)
		}
	}
	c.mu.Unlock()
	c.wg.Wait()
}
