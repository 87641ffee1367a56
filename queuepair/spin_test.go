package queuepair

import (
	"runtime"
	"testing"
	"time"
)

// resetSpin clears the spinners' shared backoff, now and after the test.
func resetSpin(t *testing.T) {
	reset := func() { spinSkip.Store(0); spinMissN.Store(0); spinN.Store(0) }
	reset()
	t.Cleanup(reset)
}

// TestSpinnerGOMAXPROCS1: with GOMAXPROCS 1 a waiter never spins (the
// goroutine that completes its work needs the processor).
func TestSpinnerGOMAXPROCS1(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	resetSpin(t) // GOMAXPROCS read again
	var s spinner
	if s.more() {
		t.Fatal("a spinner spun with GOMAXPROCS 1")
	}
}

// TestSpinnerBoundedAndBacksOff: a spin whose outcome never comes ends
// (after spinFor, not before), and the waits after it park at once, twice
// as many after each miss; a spin that sees its outcome ends the backoff.
func TestSpinnerBoundedAndBacksOff(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	resetSpin(t)
	miss := func() {
		t.Helper()
		var s spinner
		t0 := time.Now()
		for s.more() {
			if time.Since(t0) > 10*time.Second {
				t.Fatal("a spin went on for 10 s")
			}
		}
		if d := time.Since(t0); d < spinFor {
			t.Fatalf("a spin ended after %v, before spinFor (%v)", d, spinFor)
		}
	}
	parksAtOnce := func(want int) {
		t.Helper()
		for i := range want {
			var s spinner
			if s.more() {
				t.Fatalf("wait %d of %d after a miss spun", i+1, want)
			}
		}
	}
	miss()
	parksAtOnce(1)
	miss()
	parksAtOnce(2)
	miss()
	parksAtOnce(4)

	var s spinner
	if !s.more() {
		t.Fatal("the wait after the backoff did not spin")
	}
	s.hit() // its outcome came
	miss()
	parksAtOnce(1) // the backoff starts over
}
