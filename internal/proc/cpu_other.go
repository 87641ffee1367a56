//go:build !linux

package proc

import (
	"os/exec"
	"syscall"
)

// AllowedCPUs, PinProcess and PinSelf need Linux.
func AllowedCPUs() ([]int, error)   { return nil, ErrNoAffinity }
func PinProcess(pid, cpu int) error { return ErrNoAffinity }
func PinSelf(cpu int) error         { return ErrNoAffinity }

func sysProcAttr(syscall.Signal) *syscall.SysProcAttr { return nil }

func pinnedCommand(path string, args []string, pin bool, cpu int) (*exec.Cmd, bool) {
	return exec.Command(path, args...), pin
}
