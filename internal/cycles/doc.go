// Package cycles times short intervals (one operation of a few hundred
// nanoseconds) with a clock whose own cost is small beside them.
//
// time.Now reads two clocks through the vDSO (wall and monotonic): on a
// KVM guest each read costs 40–70 ns, so a latency timed with time.Now and
// time.Since carries about one read's cost in every figure. Where the CPU's
// time-stamp counter can be trusted (amd64, and the kernel itself keeps
// time with it: clocksource "tsc", which it picks only for an invariant
// counter synchronised across CPUs), a Clock reads the counter instead
// (LFENCE; RDTSC: about 10–25 ns), scaled to nanoseconds by a calibration
// against the monotonic clock, as UCX's ucs_get_time and perftest's
// get_cycles do; elsewhere it reads the monotonic clock once per call.
//
// Calibrate blocks for about 40 ms where it tries the counter (two 20 ms
// calibrations that must agree within 0.2%); Now and Since never block and
// allocate nothing. A Clock is safe for concurrent use; the zero Clock
// reads the monotonic clock. Intervals are never negative. The kernel's
// clocksource is read once: a counter the kernel gives up on later keeps
// being read.
package cycles
