package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	// Daemons the tests start serve /metrics on ports of their own, not on
	// the fixed default another test (or package) may hold.
	os.Setenv("RDMAMGR_METRICS_LISTEN", "127.0.0.1:0")
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// testBinary builds rdmamgr once per test run.
func testBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "rdmamgr-cmd-test-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "rdmamgr")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// daemon is a `rdmamgr serve` child.
type daemon struct {
	addr    string // actor-system address
	metrics string // admin listener HOST:PORT ("" when off)
	cmd     *exec.Cmd
	stderr  *syncBuf
	exited  chan struct{}
}

var metricsRE = regexp.MustCompile(`metrics=http://(\S+)/metrics`)

// startDaemon runs serve on loopback with an admin listener on a free port
// and extra flags; it is stopped (SIGTERM) when the test ends.
func startDaemon(t *testing.T, extra ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, nil, extra...)
}

// startDaemonEnv is startDaemon with variables added to the environment.
func startDaemonEnv(t *testing.T, env []string, extra ...string) *daemon {
	t.Helper()
	bin := testBinary(t)
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--log-level", "info", "--metrics-listen", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	d := &daemon{cmd: cmd, stderr: &syncBuf{}, exited: make(chan struct{})}
	cmd.Stderr = d.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() { d.stop(t) })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("serve %v: no ready line: %v\nstderr:\n%s", args, err, d.stderr)
	}
	go io.Copy(io.Discard, stdout)
	d.addr = strings.TrimSpace(strings.TrimPrefix(line, "ready "))
	wait := 5 * time.Second
	if lastValue(args, "--log-level") != "info" || lastValue(args, "--metrics-listen") == "" {
		wait = 0 // no "serving ... metrics=http://" line
	}
	for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if m := metricsRE.FindStringSubmatch(d.stderr.String()); m != nil {
			d.metrics = m[1]
			break
		}
	}
	return d
}

// lastValue is the value of the last "--name value" in args.
func lastValue(args []string, name string) string {
	v := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			v = args[i+1]
		}
	}
	return v
}

// stop sends SIGTERM and waits; a daemon that does not exit is killed.
func (d *daemon) stop(t *testing.T) {
	select {
	case <-d.exited:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		t.Errorf("daemon did not stop within 20s of SIGTERM")
	}
}

// kill ends the daemon at once (SIGKILL).
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// runBin runs the binary with args and returns stdout, stderr and the exit
// status.
func runBin(t *testing.T, ctx context.Context, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, testBinary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("rdmamgr %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return stdout.String(), stderr.String(), code
}

// syncBuf is a bytes.Buffer safe for a child's writes and the test's reads.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
