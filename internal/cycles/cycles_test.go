package cycles

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSinceAgreesWithMonotonic times one sleep with the Clock inside a
// span timed by the monotonic clock: the Clock's interval is at least the
// sleep and, within the calibration's error, at most the outer span.
func TestSinceAgreesWithMonotonic(t *testing.T) {
	c := Calibrate()
	t.Logf("source %s, floor %v", c.Source(), c.Floor(1001))
	const sleep = 5 * time.Millisecond
	m0 := time.Now()
	t0 := c.Now()
	time.Sleep(sleep)
	d := c.Since(t0)
	outer := time.Since(m0)
	if d < sleep*99/100 {
		t.Fatalf("Since = %v after a sleep of %v", d, sleep)
	}
	if d > outer*101/100 {
		t.Fatalf("Since = %v, more than the %v around it", d, outer)
	}
}

// TestNeverNegative: the counter does not run backwards between two
// readings of one goroutine, and an interval from a reading later than
// now is clamped to 0, on both sources.
func TestNeverNegative(t *testing.T) {
	if haveTSC && kernelTrustsTSC() {
		prev := rdtsc()
		for i := range 100000 {
			if now := rdtsc(); now < prev {
				t.Fatalf("reading %d: the counter went from %d back to %d", i, prev, now)
			} else {
				prev = now
			}
		}
	}
	for _, c := range []*Clock{Calibrate(), {}} {
		if d := c.Since(c.Now() + 1e12); d != 0 {
			t.Fatalf("%s: Since a reading in the future = %v, want 0", c.Source(), d)
		}
	}
}

// TestMonotonicWithoutTSC: where the kernel does not keep time with the
// counter, the clock reads the monotonic one.
func TestMonotonicWithoutTSC(t *testing.T) {
	f := filepath.Join(t.TempDir(), "current_clocksource")
	if err := os.WriteFile(f, []byte("kvm-clock\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := clocksourceFile
	clocksourceFile = f
	defer func() { clocksourceFile = old }()
	if c := Calibrate(); c.Source() != "monotonic" {
		t.Fatalf("source %s with clocksource kvm-clock", c.Source())
	}
	clocksourceFile = filepath.Join(t.TempDir(), "missing")
	if c := Calibrate(); c.Source() != "monotonic" {
		t.Fatalf("source %s without a clocksource file", c.Source())
	}
}

func BenchmarkSince(b *testing.B) {
	for _, c := range []*Clock{Calibrate(), {}} {
		b.Run(c.Source(), func(b *testing.B) {
			var s time.Duration
			for b.Loop() {
				s += c.Since(c.Now())
			}
			_ = s
		})
	}
	b.Run("time.Now", func(b *testing.B) {
		var s time.Duration
		for b.Loop() {
			s += time.Since(time.Now())
		}
		_ = s
	})
}

// BenchmarkFloor reports what each way of timing adds to the interval it
// times (the median of empty intervals): the Clock's source, the
// monotonic clock read once per end, and time.Now with time.Since, as the
// bench timed operations before this package. Its ns/op is one empty
// interval of the Clock's.
func BenchmarkFloor(b *testing.B) {
	c := Calibrate()
	ds := make([]time.Duration, 10001)
	for i := range ds {
		t0 := time.Now()
		ds[i] = time.Since(t0)
	}
	slices.Sort(ds)
	var s time.Duration
	for b.Loop() {
		s += c.Since(c.Now())
	}
	b.ReportMetric(float64(c.Floor(10001).Nanoseconds()), c.Source()+"-floor-ns")
	b.ReportMetric(float64((&Clock{}).Floor(10001).Nanoseconds()), "monotonic-floor-ns")
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), "time.Now-floor-ns")
}
