package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
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
		binErr = proc.Build(".", binPath)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// daemon is a `rdmamgr serve` child.
type daemon struct {
	*proc.Proc
	addr    string // actor-system address
	metrics string // admin listener HOST:PORT ("" when off)
	stderr  *proc.Buffer
}

var metricsRE = regexp.MustCompile(`metrics=http://(\S+)/metrics`)

// startDaemon runs serve on loopback with an admin listener on a free port
// and extra flags; it is stopped (SIGTERM; it must exit 0) when the test
// ends.
func startDaemon(t *testing.T, extra ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, nil, extra...)
}

// startDaemonEnv is startDaemon with variables added to the environment.
func startDaemonEnv(t *testing.T, env []string, extra ...string) *daemon {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--log-level", "info", "--metrics-listen", "127.0.0.1:0"}, extra...)
	d := &daemon{stderr: &proc.Buffer{}}
	p, err := proc.Start(context.Background(), proc.Spec{Name: "serve", Path: testBinary(t), Args: args, Env: env, Stderr: d.stderr})
	if err != nil {
		t.Fatalf("serve %v: %v\nstderr:\n%s", args, err, d.stderr)
	}
	d.Proc, d.addr = p, p.Addr
	t.Cleanup(func() { d.stop(t) })
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
	if err := d.Stop(20 * time.Second); err != nil {
		t.Errorf("%v\nstderr:\n%s", err, d.stderr)
	}
}

// kill ends the daemon at once (SIGKILL).
func (d *daemon) kill() { _ = d.Kill() }

// runBin runs the binary with args and returns stdout, stderr and the exit
// status.
func runBin(t *testing.T, ctx context.Context, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr proc.Buffer
	err := proc.Run(ctx, proc.Spec{Path: testBinary(t), Args: args, Stdout: &stdout, Stderr: &stderr})
	code := proc.ExitCode(err)
	if code < 0 {
		t.Fatalf("rdmamgr %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), code
}

// spawnBin starts the binary with args; it is killed if still running when
// the test ends.
func spawnBin(t *testing.T, stdout, stderr io.Writer, args ...string) *proc.Proc {
	t.Helper()
	p, err := proc.Spawn(proc.Spec{Path: testBinary(t), Args: args, Stdout: stdout, Stderr: stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	return p
}
