package bench

import (
	"sync"

	"github.com/rdmamgr/rdmamgr/internal/cycles"
)

// clock times each operation a worker posts and waits for; calibrated
// once per process (Run calibrates it before anything is timed).
var clock = sync.OnceValue(cycles.Calibrate)

// LatencyClock is the clock that times operations one by one, here and in
// bench/baseline's ping-pong, so both sides of a latency ratio read the
// same clock: the CPU's time-stamp counter where the kernel keeps time
// with it, else the monotonic clock (internal/cycles). Its first call
// calibrates it (about 40 ms).
func LatencyClock() *cycles.Clock { return clock() }
