package main

import (
	"testing"

	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// TestBenchMemory: --memory host is the bench as ever (its other checks
// run), a bad value is a usage error, and cuda[:N] is refused with the
// reason: here no driver (no GPU on the machines this runs on).
func TestBenchMemory(t *testing.T) {
	usageErr([]string{"bench", "--memory", "gpu"}, `--memory: memory "gpu"`).run(t)
	usageErr([]string{"bench", "--memory", "cuda:64"}, `--memory: memory "cuda:64"`).run(t)
	usageErr([]string{"bench", "--memory", "host"}, "--peer is required").run(t)
	if d, err := cuda.Open(); err == nil {
		d.Close()
		t.Skip("a CUDA driver is present: the refusal names the initiator's staging instead")
	}
	cliCase{args: []string{"bench", "--peer", "127.0.0.1:1", "--memory", "cuda:1"}, code: 1,
		stderrHas: []string{"bench --memory cuda:1", "libcuda.so.1", "not supported"}, stdoutNone: true}.run(t)
}
