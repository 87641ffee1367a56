package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is its own child: with PROC_TEST_CHILD set it acts as
// the child that variable names instead of running the tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("PROC_TEST_CHILD"); mode != "" {
		child(mode)
		return
	}
	os.Exit(m.Run())
}

func child(mode string) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	switch mode {
	case "serve": // ready, then exit 0 on SIGTERM
		fmt.Println("noise first")
		fmt.Println("ready 127.0.0.1:4242")
		<-sig
		os.Exit(0)
	case "fail": // ready, then exit 3 on SIGTERM
		fmt.Println("ready x")
		<-sig
		os.Exit(3)
	case "deaf": // ready, ignores SIGTERM
		fmt.Println("ready x")
		for {
			<-sig
		}
	case "exit": // exits before ready
		fmt.Fprintln(os.Stderr, "cannot start")
		os.Exit(1)
	case "mute": // never ready
		<-sig
		os.Exit(0)
	}
}

func spec(mode string) Spec {
	return Spec{Name: mode, Path: os.Args[0], Args: []string{"-test.run=^$"}, Env: []string{"PROC_TEST_CHILD=" + mode}}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestStartStop(t *testing.T) {
	var out Buffer
	s := spec("serve")
	s.Stdout = &out
	p, err := Start(ctx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	if p.Addr != "127.0.0.1:4242" {
		t.Errorf("Addr %q", p.Addr)
	}
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if p.ExitCode() != 0 || !strings.Contains(out.String(), "noise first\nready 127.0.0.1:4242\n") {
		t.Errorf("exit %d, stdout %q", p.ExitCode(), out.String())
	}
}

func TestStopReportsFailure(t *testing.T) {
	p, err := Start(ctx(t), spec("fail"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(time.Minute); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Stop of a child exiting 3: %v", err)
	}
}

func TestStopKillsTheDeaf(t *testing.T) {
	p, err := Start(ctx(t), spec("deaf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(100 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not exit") {
		t.Fatalf("Stop of a child ignoring SIGTERM: %v", err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("still running after Stop")
	}
}

func TestKillIsNoFailure(t *testing.T) {
	p, err := Start(ctx(t), spec("fail"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if !p.Killed() || p.ExitCode() != -1 {
		t.Errorf("killed %v, exit %d", p.Killed(), p.ExitCode())
	}
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("Stop after Kill: %v", err)
	}
}

func TestStartFailures(t *testing.T) {
	var stderr Buffer
	s := spec("exit")
	s.Stderr = &stderr
	if _, err := Start(ctx(t), s); err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Errorf("child exiting at once: %v", err)
	}
	if !strings.Contains(stderr.String(), "cannot start") {
		t.Errorf("stderr %q", stderr.String())
	}
	s = spec("mute")
	s.ReadyTimeout = 200 * time.Millisecond
	if _, err := Start(ctx(t), s); err == nil || !strings.Contains(err.Error(), "not ready within") {
		t.Errorf("silent child: %v", err)
	}
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Start(c, spec("mute")); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("ended context: %v", err)
	}
	if _, err := Start(ctx(t), Spec{Name: "nothing", Path: "/nonexistent/prog"}); err == nil {
		t.Error("a missing program started")
	}
}

func TestReadyWatcher(t *testing.T) {
	ch := make(chan string, 1)
	var tee Buffer
	w := &readyWatcher{ready: ch, tee: &tee}
	parts := []string{"noise\nrea", "dy 127.0.0.1:", "4242\nready 1.2.3.4:5\n"}
	for _, p := range parts {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	if got := <-ch; got != "127.0.0.1:4242" {
		t.Fatalf("ready address %q", got)
	}
	select {
	case got := <-ch:
		t.Fatalf("second ready line passed on: %q", got)
	default:
	}
	if tee.String() != strings.Join(parts, "") {
		t.Errorf("tee got %q", tee.String())
	}
}

// A pinned child runs on its CPU alone.
func TestPin(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, err := AllowedCPUs(); err != ErrNoAffinity {
			t.Fatalf("AllowedCPUs off Linux: %v", err)
		}
		t.Skip("CPU placement needs Linux")
	}
	cpus, err := AllowedCPUs()
	if err != nil || len(cpus) == 0 {
		t.Fatalf("AllowedCPUs: %v, %v", cpus, err)
	}
	cpu := cpus[len(cpus)-1]
	for _, viaTaskset := range []bool{true, false} {
		s := spec("serve")
		s.Pin, s.CPU = true, cpu
		if !viaTaskset {
			t.Setenv("PATH", "") // no taskset: pinned after the start
		}
		p, err := Start(ctx(t), s)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("Cpus_allowed_list:\t%d\n", cpu); !strings.Contains(string(b), want) {
			t.Errorf("taskset=%v: child's status lacks %q", viaTaskset, want)
		}
		if err := p.Stop(time.Minute); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRun(t *testing.T) {
	var out Buffer
	s := spec("exit")
	s.Stdout, s.Stderr = &out, &out
	err := Run(ctx(t), s)
	if ExitCode(err) != 1 || !strings.Contains(out.String(), "cannot start") {
		t.Errorf("Run of a child exiting 1: %v (code %d), output %q", err, ExitCode(err), out.String())
	}
	c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := Run(c, spec("mute")); !errors.Is(err, context.DeadlineExceeded) || ExitCode(err) != -1 {
		t.Errorf("Run past its context: %v (code %d)", err, ExitCode(err))
	}
	if ExitCode(nil) != 0 {
		t.Error("ExitCode(nil) != 0")
	}
}
