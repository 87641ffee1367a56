package netns

import "syscall"

// deathSignal has a child killed when the test process dies.
func deathSignal() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func kill(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }
