package testscale

import (
	"os"
	"strconv"
	"sync"
	"time"
)

// raceFactor is how much slower the race detector makes this module's
// code, roughly (5 to 10 times, more with many goroutines).
const raceFactor = 5

// Factor is the number Timeout multiplies by: raceFactor under -race,
// else 1, times RDMAMGR_TEST_SCALE when that is a number ≥ 1.
func Factor() float64 {
	f := 1.0
	if Race {
		f = raceFactor
	}
	return f * envFactor()
}

var envFactor = sync.OnceValue(func() float64 {
	v, err := strconv.ParseFloat(os.Getenv("RDMAMGR_TEST_SCALE"), 64)
	if err != nil || v < 1 {
		return 1
	}
	return v
})

// Timeout returns d scaled by Factor.
func Timeout(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Factor())
}
