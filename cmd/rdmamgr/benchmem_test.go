package main

import (
	"testing"

	"github.com/rdmamgr/rdmamgr/internal/cuda"
)

// TestBenchMemory: --memory host is the bench as ever (its other checks
// run), a bad value is a usage error, cuda[:N] is not with --verify or
// --baseline (nor is a --peer-memory of a device), and without a driver (no GPU on the machines this runs on)
// it is refused with the reason.
func TestBenchMemory(t *testing.T) {
	usageErr([]string{"bench", "--memory", "gpu"}, `--memory: memory "gpu"`).run(t)
	usageErr([]string{"bench", "--memory", "cuda:64"}, `--memory: memory "cuda:64"`).run(t)
	usageErr([]string{"bench", "--memory", "host"}, "--peer is required").run(t)
	usageErr([]string{"bench", "--memory", "cuda", "--verify", "--peer", "127.0.0.1:1"}, "--memory cuda:0: not with --verify").run(t)
	usageErr([]string{"bench", "--memory", "cuda", "--baseline"}, "--memory cuda:0: not with --verify or --baseline").run(t)
	usageErr([]string{"bench", "--peer-memory", "gpu"}, `--peer-memory: memory "gpu"`).run(t)
	usageErr([]string{"bench", "--peer-memory", "cuda:2", "--verify", "--peer", "127.0.0.1:1"}, "--peer-memory cuda:2: not with --verify").run(t)
	usageErr([]string{"bench", "--memory", "cuda", "--peer-memory", "host", "--baseline"}, "--memory cuda:0: not with --verify or --baseline").run(t)
	if d, err := cuda.Open(); err == nil {
		d.Close()
		t.Skip("a CUDA driver is present")
	}
	cliCase{args: []string{"bench", "--peer", "127.0.0.1:1", "--memory", "cuda:1"}, code: 1,
		stderrHas: []string{"bench --memory cuda:1", "libcuda.so.1", "not supported"}, stdoutNone: true}.run(t)
	// A peer's GPU buffer needs no driver here: the run gets as far as the
	// peer (none listens there).
	cliCase{args: []string{"bench", "--peer", "127.0.0.1:1", "--peer-memory", "cuda", "--timeout", "5s"}, code: 1,
		stderrHas: []string{"127.0.0.1:1"}, stderrNot: []string{"libcuda"}, stdoutNone: true}.run(t)
}

// TestServeCUDA: serve --cuda without a CUDA driver refuses to start,
// saying why (exit 1, nothing on stdout).
func TestServeCUDA(t *testing.T) {
	if d, err := cuda.Open(); err == nil {
		d.Close()
		t.Skip("a CUDA driver is present")
	}
	cliCase{args: []string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "off", "--cuda"}, code: 1,
		stderrHas: []string{"serve --cuda", "libcuda.so.1", "not supported"}, stdoutNone: true}.run(t)
}
