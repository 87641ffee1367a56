//go:build linux

package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// AllowedCPUs returns the CPUs this process may run on, lowest first.
func AllowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for i := 0; i < len(set)*64 && len(cpus) < set.Count(); i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// PinProcess sets the affinity of every thread of process pid to cpu. New
// threads inherit the affinity of the thread that creates them, so the
// listing is repeated until a pass finds no thread it had not pinned.
func PinProcess(pid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	done := make(map[int]bool)
	for pass := 0; pass < 100; pass++ {
		ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
		if err != nil {
			return fmt.Errorf("pin process %d to CPU %d: %w", pid, cpu, err)
		}
		fresh := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh++
			// A thread may exit between the listing and the call.
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("pin thread %d of process %d to CPU %d: %w", tid, pid, cpu, err)
			}
			done[tid] = true
		}
		if fresh == 0 {
			return nil
		}
	}
	return fmt.Errorf("pin process %d to CPU %d: threads keep appearing", pid, cpu)
}

// PinSelf pins every thread of this process to cpu.
func PinSelf(cpu int) error { return PinProcess(os.Getpid(), cpu) }

// sysProcAttr makes a child get sig (default SIGKILL) if this process dies.
func sysProcAttr(sig syscall.Signal) *syscall.SysProcAttr {
	if sig == 0 {
		sig = syscall.SIGKILL
	}
	return &syscall.SysProcAttr{Pdeathsig: sig}
}

// pinnedCommand returns a command running path args, on cpu if pin. With
// taskset(1) the child is pinned before it runs; without, pinAfterStart is
// true and the caller pins the started process.
func pinnedCommand(path string, args []string, pin bool, cpu int) (cmd *exec.Cmd, pinAfterStart bool) {
	if !pin {
		return exec.Command(path, args...), false
	}
	if ts, err := exec.LookPath("taskset"); err == nil {
		return exec.Command(ts, append([]string{"-c", strconv.Itoa(cpu), path}, args...)...), false
	}
	return exec.Command(path, args...), true
}
