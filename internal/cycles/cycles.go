package cycles

import (
	"os"
	"slices"
	"strings"
	"time"
)

// Clock reads a counter (Now) and turns the distance from an earlier
// reading into a duration (Since). Calibrate sets its fields; it only
// reads them afterwards. The zero Clock reads the monotonic clock.
type Clock struct {
	tsc       bool    // Now reads the time-stamp counter
	nsPerTick float64 // with tsc: nanoseconds per tick
}

// base is what the monotonic readings of every Clock count from.
var base = time.Now()

// Source names what a Clock reads: "tsc" or "monotonic".
func (c *Clock) Source() string {
	if c.tsc {
		return "tsc"
	}
	return "monotonic"
}

// Now is the clock's current reading, for Since.
func (c *Clock) Now() int64 {
	if c.tsc {
		return rdtsc()
	}
	return int64(time.Since(base))
}

// Since is the time from reading t (of Now) to now; never negative.
func (c *Clock) Since(t int64) time.Duration {
	var d time.Duration
	if c.tsc {
		d = time.Duration(float64(rdtsc()-t) * c.nsPerTick)
	} else {
		d = time.Since(base) - time.Duration(t)
	}
	return max(d, 0)
}

// Floor is the median of n empty intervals (Since right after Now): what
// the clock itself adds to each interval it times.
func (c *Clock) Floor(n int) time.Duration {
	n = max(n, 1)
	ds := make([]time.Duration, n)
	for i := range ds {
		ds[i] = c.Since(c.Now())
	}
	slices.Sort(ds)
	return ds[n/2]
}

// calibration is how long each of Calibrate's two measurements lasts.
const calibration = 20 * time.Millisecond

// Calibrate returns a clock reading the time-stamp counter where it can be
// trusted (see the package comment) and the monotonic clock elsewhere, or
// where the counter's two calibrations disagree by more than 0.2%.
func Calibrate() *Clock {
	c := &Clock{}
	if !haveTSC || !kernelTrustsTSC() {
		return c
	}
	a, b := perTick(calibration), perTick(calibration)
	if a <= 0 || b <= 0 || a/b > 1.002 || b/a > 1.002 {
		return c
	}
	c.tsc, c.nsPerTick = true, (a+b)/2
	return c
}

// perTick measures the counter's nanoseconds per tick over about d; 0 if
// it did not advance or a reading could not be paired with the monotonic
// clock closely.
func perTick(d time.Duration) float64 {
	m0, t0, ok0 := paired()
	time.Sleep(d)
	m1, t1, ok1 := paired()
	if !ok0 || !ok1 || t1 <= t0 {
		return 0
	}
	return float64(m1-m0) / float64(t1-t0)
}

// pairSlack bounds the monotonic time around one counter reading that
// paired accepts: a thread descheduled between the two reads would skew
// the calibration by as long as it was away.
const pairSlack = 20 * time.Microsecond

// paired reads the counter between two monotonic readings and returns the
// middle of those with it; false when five tries all took longer than
// pairSlack.
func paired() (mono time.Duration, tick int64, ok bool) {
	for range 5 {
		a := time.Since(base)
		t := rdtsc()
		b := time.Since(base)
		if b-a <= pairSlack {
			return a + (b-a)/2, t, true
		}
	}
	return 0, 0, false
}

// clocksourceFile names the kernel's clock; a variable for tests.
var clocksourceFile = "/sys/devices/system/clocksource/clocksource0/current_clocksource"

// kernelTrustsTSC reports whether the kernel keeps time with the counter.
func kernelTrustsTSC() bool {
	b, err := os.ReadFile(clocksourceFile)
	return err == nil && strings.TrimSpace(string(b)) == "tsc"
}
