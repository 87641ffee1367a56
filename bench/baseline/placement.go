package baseline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// Placement says where the bench process and the servers it talks to run,
// as bench's --placement names it: any (no pinning), same (all on one CPU)
// or split (bench on one CPU, the servers on another).
type Placement struct {
	Mode      string
	BenchCPU  int // -1: not pinned
	ServerCPU int // -1: not pinned
}

// StopGrace is how long a server StartServer started has to exit after
// SIGTERM before it is killed.
const StopGrace = 15 * time.Second

// PlanPlacement picks the CPUs of mode among those this process may use:
// the first for bench, the second (split) or the first (same) for the
// servers.
func PlanPlacement(mode string) (Placement, error) {
	switch mode {
	case "any":
		return Placement{Mode: mode, BenchCPU: -1, ServerCPU: -1}, nil
	case "same", "split":
	default:
		return Placement{}, configErrorf("--placement %q: want any, same or split", mode)
	}
	cpus, err := proc.AllowedCPUs()
	if err != nil {
		return Placement{}, err
	}
	if len(cpus) == 0 {
		return Placement{}, errors.New("no CPU in this process's affinity mask")
	}
	if mode == "same" {
		return Placement{Mode: mode, BenchCPU: cpus[0], ServerCPU: cpus[0]}, nil
	}
	if len(cpus) < 2 {
		return Placement{}, configErrorf("--placement split needs two CPUs; this process may run on CPU %d only", cpus[0])
	}
	return Placement{Mode: mode, BenchCPU: cpus[0], ServerCPU: cpus[1]}, nil
}

// Describe says in words where everything runs; extManager and extServer
// are set when bench did not start (and so did not pin) that server.
func (p Placement) Describe(extManager, extServer bool) string {
	var b strings.Builder
	switch p.Mode {
	case "any":
		b.WriteString("any (no pinning; the scheduler places bench and the servers)")
	case "same":
		fmt.Fprintf(&b, "same (bench, manager and baseline server all on CPU %d)", p.BenchCPU)
	case "split":
		fmt.Fprintf(&b, "split (bench on CPU %d; manager and baseline server on CPU %d)", p.BenchCPU, p.ServerCPU)
	}
	if extManager && p.Mode != "any" {
		b.WriteString("; the --peer manager was not started by bench and is not pinned")
	}
	if extServer && p.Mode != "any" {
		b.WriteString("; the --baseline-peer server was not started by bench and is not pinned")
	}
	return b.String()
}

// PinBench pins every thread of this process to the bench CPU, and
// GOMAXPROCS to 1 unless the environment sets it (nothing for any). Call
// it before starting the goroutines and threads to be measured: new
// threads inherit the affinity.
func (p Placement) PinBench() error {
	if p.BenchCPU < 0 {
		return nil
	}
	if err := proc.PinSelf(p.BenchCPU); err != nil {
		return err
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	return nil
}

// StartServer starts a server process, path args, that prints "ready
// ADDR", on the servers' CPU (with GOMAXPROCS=1 unless the environment
// sets it), and waits until it is ready. Its stderr goes to stderr; it
// gets SIGTERM if this process dies. Stop it with Stop(StopGrace).
func (p Placement) StartServer(ctx context.Context, name, path string, args []string, stderr io.Writer) (*proc.Proc, error) {
	s := proc.Spec{Name: name, Path: path, Args: args, Stderr: stderr, DeathSignal: syscall.SIGTERM}
	if p.ServerCPU >= 0 {
		s.Pin, s.CPU = true, p.ServerCPU
		if os.Getenv("GOMAXPROCS") == "" {
			s.Env = []string{"GOMAXPROCS=1"}
		}
	}
	return proc.Start(ctx, s)
}
