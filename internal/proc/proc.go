package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultReadyTimeout bounds Start's wait for the ready line when
// Spec.ReadyTimeout is 0. Generous: a loaded machine (-race, 2 cores) must
// not fail a start; it only keeps a broken child from hanging its parent.
const DefaultReadyTimeout = 60 * time.Second

// killWait bounds waiting for a SIGKILLed child to be reaped.
const killWait = 60 * time.Second

// Spec says what to run and how.
type Spec struct {
	Name string   // names the child in errors ("manager", "d1")
	Path string   // program
	Args []string // its arguments
	Env  []string // added to this process's environment
	Dir  string   // working directory ("": this process's)
	// Stdout, if set, receives everything the child writes on stdout, the
	// ready line included. It must be safe for use while the parent reads
	// it (Buffer is).
	Stdout io.Writer
	// Stderr receives the child's stderr (nil: discarded).
	Stderr io.Writer
	// Stdin, if set, is the child's stdin (nil: the null device). Give an
	// *os.File (an os.Pipe's read end): Wait does not wait for a copy.
	Stdin *os.File
	// Pin runs the child on CPU alone.
	Pin bool
	CPU int
	// DeathSignal is sent to the child if this process dies (Linux; 0:
	// SIGKILL).
	DeathSignal syscall.Signal
	// ReadyTimeout bounds Start's wait for the ready line (0:
	// DefaultReadyTimeout).
	ReadyTimeout time.Duration
}

// Proc is a running (or exited) child.
type Proc struct {
	Name string
	// Addr is what the child printed after "ready " (set by Start).
	Addr string

	cmd    *exec.Cmd
	ready  chan string
	done   chan struct{}
	err    error // of cmd.Wait, set before done is closed
	killed atomic.Bool

	stopOnce sync.Once
	stopErr  error
}

// Start starts the child s describes and waits for its "ready ADDR" line.
// A child that exits first, or is not ready when ctx ends or
// s.ReadyTimeout passes, is an error (and is killed).
func Start(ctx context.Context, s Spec) (*Proc, error) {
	p, err := Spawn(s)
	if err != nil {
		return nil, err
	}
	timeout := s.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case p.Addr = <-p.ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s (%s) exited before it was ready: %v", p.Name, p.cmdline(), p.err)
	case <-t.C:
		_ = p.Kill()
		return nil, fmt.Errorf("%s (%s) not ready within %v", p.Name, p.cmdline(), timeout)
	case <-ctx.Done():
		_ = p.Kill()
		return nil, fmt.Errorf("start %s: %w", p.Name, ctx.Err())
	}
}

// Spawn starts the child s describes and returns at once.
func Spawn(s Spec) (*Proc, error) {
	if s.Name == "" {
		s.Name = s.Path
	}
	cmd, pinAfterStart := pinnedCommand(s.Path, s.Args, s.Pin, s.CPU)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Dir = s.Dir
	p := &Proc{Name: s.Name, cmd: cmd, ready: make(chan string, 1), done: make(chan struct{})}
	cmd.Stdout = &readyWatcher{ready: p.ready, tee: s.Stdout}
	cmd.Stderr = s.Stderr
	if s.Stdin != nil {
		cmd.Stdin = s.Stdin
	}
	cmd.SysProcAttr = sysProcAttr(s.DeathSignal)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if pinAfterStart {
		if err := PinProcess(cmd.Process.Pid, s.CPU); err != nil {
			_ = p.Kill()
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
	}
	return p, nil
}

// Run runs the child s describes to its end and returns what
// exec.Cmd.Wait did (an *exec.ExitError for a failure status). If ctx ends
// first the child is killed and the error says so.
func Run(ctx context.Context, s Spec) error {
	p, err := Spawn(s)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		_ = p.Kill()
		return fmt.Errorf("%s (%s): %w (%v)", p.Name, p.cmdline(), ctx.Err(), p.err)
	}
}

// ExitCode is the exit status in err, an error of Run or Wait: 0 for nil,
// -1 for an error without one (the child did not start or was killed).
func ExitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

func (p *Proc) cmdline() string { return strings.Join(p.cmd.Args, " ") }

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the child has exited and its stdout is drained.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the child to exit and returns what exec.Cmd.Wait did.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// ExitCode is the child's exit status once Done is closed (-1 if a signal
// ended it).
func (p *Proc) ExitCode() int {
	<-p.done
	return p.cmd.ProcessState.ExitCode()
}

// Signal sends sig to the child.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL and waits for the child to go; its exit status is no
// longer a failure for Stop.
func (p *Proc) Kill() error {
	p.killed.Store(true)
	_ = p.cmd.Process.Kill()
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("%s: still running %v after SIGKILL", p.Name, killWait)
	}
}

// Killed reports whether Kill was called.
func (p *Proc) Killed() bool { return p.killed.Load() }

// Stop ends the child: SIGTERM (unless Kill ended it), then SIGKILL if it
// has not exited within grace. It returns an error if the child had to be
// killed or exited with a failure status (not after Kill). Only the first
// call acts; later ones return its result.
func (p *Proc) Stop(grace time.Duration) error {
	p.stopOnce.Do(func() { p.stopErr = p.stop(grace) })
	return p.stopErr
}

func (p *Proc) stop(grace time.Duration) error {
	select {
	case <-p.done:
	default:
		if !p.killed.Load() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			if err := p.Kill(); err != nil {
				return err
			}
			return fmt.Errorf("%s did not exit within %v of SIGTERM; killed", p.Name, grace)
		}
	}
	if p.err != nil && !p.killed.Load() {
		return fmt.Errorf("%s: %w", p.Name, p.err)
	}
	return nil
}
