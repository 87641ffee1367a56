//go:build linux

package shm

import (
	"testing"
	"time"
)

// TestCoarseClock: readings lag CLOCK_MONOTONIC by little and never lead
// it; the goroutine stops once nobody reads and starts again for the next
// reader; after close a reader reads the clock itself and nothing runs.
func TestCoarseClock(t *testing.T) {
	var c coarseClock
	check := func(what string) {
		t.Helper()
		before := nanotime()
		got := c.read()
		after := nanotime()
		if got > after {
			t.Fatalf("%s: reading %d is ahead of the clock %d", what, got, after)
		}
		// A tick is 1 ms; a loaded machine may delay the goroutine.
		if lag := time.Duration(before - got); lag > time.Second {
			t.Fatalf("%s: reading lags the clock by %v", what, lag)
		}
	}
	check("first read")
	if !c.running.Load() {
		t.Fatal("no ticking goroutine after a read")
	}
	time.Sleep(20 * time.Millisecond)
	check("while ticking")
	deadline := time.Now().Add(30 * time.Second)
	for c.running.Load() {
		if time.Now().After(deadline) {
			t.Fatal("goroutine still running with no reader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	check("after it stopped")
	if !c.running.Load() {
		t.Fatal("no ticking goroutine after a read of a stopped clock")
	}
	c.close()
	if c.running.Load() {
		t.Fatal("goroutine running after close")
	}
	check("after close")
	if c.running.Load() {
		t.Fatal("a read after close started the goroutine")
	}
	c.close() // idempotent
}
