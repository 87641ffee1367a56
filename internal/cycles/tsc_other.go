//go:build !amd64

package cycles

const haveTSC = false

// rdtsc is never called without a counter (haveTSC); it reads 0.
func rdtsc() int64 { return 0 }
