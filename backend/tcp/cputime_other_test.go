//go:build !unix

package tcp

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }
