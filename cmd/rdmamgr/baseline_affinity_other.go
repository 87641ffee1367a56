//go:build !linux

package main

import (
	"errors"
	"os/exec"
	"syscall"
)

var errNoAffinity = errors.New("CPU placement needs Linux; use --placement any")

func allowedCPUs() ([]int, error)            { return nil, errNoAffinity }
func pinProcess(pid, cpu int) error          { return errNoAffinity }
func pinSelf(cpu int) error                  { return errNoAffinity }
func childSysProcAttr() *syscall.SysProcAttr { return nil }

func pinnedCommand(exe string, args []string, cpu int) (*exec.Cmd, bool) {
	return exec.Command(exe, args...), cpu >= 0
}
