package coarseclock

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Now never runs ahead of the real clock, lags it by little while held,
// and the last Release leaves no goroutine (goleak checks at exit).
func TestNowFollowsTheClock(t *testing.T) {
	Acquire()
	first := Now() // starts the ticker
	if !running.Load() {
		t.Fatal("no ticker after a holder's Now")
	}
	var last time.Time
	for range 50 {
		c := Now()
		if c.After(time.Now()) {
			t.Fatalf("coarse %v ahead of the real clock", c)
		}
		if c.Before(last) {
			t.Fatalf("coarse clock went back: %v after %v", c, last)
		}
		last = c
		time.Sleep(2 * time.Millisecond)
	}
	if !last.After(first) {
		t.Fatalf("coarse clock did not advance over 100 ms: %v then %v", first, last)
	}
	// The lag is bounded by how late the runtime runs the ticker: allow a
	// loaded machine a second (a clock that stopped would fail).
	if d := Deadline(time.Second); d.Before(time.Now()) {
		t.Fatalf("Deadline(1s) %v already passed", d)
	}
	Release()
	if running.Load() {
		t.Fatal("ticker still running after the last Release")
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = Now() }() // no holder: no ticker
	<-done
	if running.Load() {
		t.Fatal("Now without a holder started the ticker")
	}
}

// A held clock nobody reads stops its ticker; the next Now restarts it.
func TestIdleTickerExits(t *testing.T) {
	Acquire()
	defer Release()
	Now()
	limit := time.Now().Add(10 * time.Second)
	for running.Load() {
		if time.Now().After(limit) {
			t.Fatal("ticker never went idle")
		}
		time.Sleep(10 * time.Millisecond)
	}
	Now()
	if !running.Load() {
		t.Fatal("Now of a holder did not restart the ticker")
	}
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	Release()
}

// Mono is nanotime, coarse: never ahead, a bounded lag, and Now reads the
// same clock.
func TestMonoFollowsNanotime(t *testing.T) {
	Acquire()
	defer Release()
	for i := range 20 {
		before := nanotime()
		m := Mono()
		after := nanotime()
		if m > after {
			t.Fatalf("read %d: Mono %d ahead of nanotime %d", i, m, after)
		}
		if lag := time.Duration(before - m); lag > time.Second { // a loaded machine; a stopped clock fails
			t.Fatalf("read %d: Mono lags nanotime by %v", i, lag)
		}
		if d := Now().Sub(base) - time.Duration(Mono()-baseMono); d > 10*time.Millisecond || d < -10*time.Millisecond {
			t.Fatalf("Now and Mono differ by %v", d)
		}
		time.Sleep(time.Millisecond)
	}
}

// DeadlineAt of a reading is Deadline as of that reading: Now at it plus
// the timeout and Resolution.
func TestDeadlineAt(t *testing.T) {
	m := Mono()
	now := base.Add(time.Duration(m - baseMono))
	for _, d := range []time.Duration{0, time.Millisecond, 30 * time.Second} {
		if got, want := DeadlineAt(m, d), now.Add(d+Resolution); !got.Equal(want) || got.Sub(want) != 0 {
			t.Fatalf("DeadlineAt(%d, %v) = %v, want %v", m, d, got, want)
		}
	}
	if a, b := DeadlineAt(m, time.Second), DeadlineAt(m+int64(time.Millisecond), time.Second); b.Sub(a) != time.Millisecond {
		t.Fatalf("a reading 1ms later moved the deadline by %v", b.Sub(a))
	}
}
