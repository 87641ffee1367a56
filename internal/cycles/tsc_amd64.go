//go:build amd64

package cycles

const haveTSC = true

// rdtsc reads the time-stamp counter after the instructions before it
// have executed (LFENCE; RDTSC). tsc_amd64.s.
func rdtsc() int64
