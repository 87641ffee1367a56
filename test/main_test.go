//go:build linux

package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/actor"
	rnode "github.com/rdmamgr/rdmamgr/node"
)

// Bounds on waiting for child processes; generous so a loaded machine
// (-race, 2 cores) does not make the tests flaky. No test asserts how long
// anything took: these only keep a broken build from hanging.
const (
	readyTimeout = 60 * time.Second // daemon prints "ready ADDR"
	exitTimeout  = 60 * time.Second // daemon exits after SIGTERM / SIGKILL
	leakTimeout  = 60 * time.Second // goroutines of rdmamgr packages end
)

var (
	// rdmamgrBin is the rdmamgr binary TestMain built.
	rdmamgrBin string
	// local is the test process's own node: its one actor system with
	// protoactor remote and its manager.
	local *node

	verboseLogs = flag.Bool("rdmamgr.logs", false, "pass the test manager's and the daemons' logs (debug level) to stderr")
)

// node is the test process's node (package node), under the names the
// tests use.
type node struct {
	n    *rnode.Node
	sys  *protoactor.ActorSystem
	addr string
	mgr  *actor.Manager
}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "rdmamgr-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	rdmamgrBin = filepath.Join(dir, "rdmamgr")
	// Daemons serve /metrics on a port of their own, not the fixed default.
	os.Setenv("RDMAMGR_METRICS_LISTEN", "127.0.0.1:0")
	build := exec.Command("go", "build", "-o", rdmamgrBin, "github.com/rdmamgr/rdmamgr/cmd/rdmamgr")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/rdmamgr: %v\n%s", err, out)
		return 1
	}

	local, err = startNode()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the test's node:", err)
		return 1
	}
	code := m.Run()
	if err := local.close(); err != nil {
		fmt.Fprintln(os.Stderr, "close the test's manager:", err)
		code = max(code, 1)
	}
	if leaked := waitNoLeaks(leakTimeout); leaked != "" {
		fmt.Fprintf(os.Stderr, "goroutines of rdmamgr packages left after the manager closed:\n\n%s\n", leaked)
		code = max(code, 1)
	}
	return code
}

func startNode() (*node, error) {
	var logger *slog.Logger
	if *verboseLogs {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", "test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := rnode.Start(ctx, rnode.Config{Logger: logger})
	if err != nil {
		return nil, err
	}
	return &node{n: n, sys: n.System(), addr: n.Addr(), mgr: n.Manager()}, nil
}

// close shuts the manager, its backends, the remote and the actor system
// down.
func (n *node) close() error { return n.n.Close() }

// client returns a client of the manager at pid, sending from the test's
// actor system.
func (n *node) client(pid *protoactor.PID) *actor.Client { return actor.NewClient(n.sys, pid) }

// waitNoLeaks polls the goroutines until none but the caller's has a frame
// in an rdmamgr package, or timeout passes; it returns the offending
// goroutines' stacks then ("" when clean).
func waitNoLeaks(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		leaked := rdmamgrGoroutines()
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rdmamgrGoroutines returns the stacks of goroutines, other than the
// caller's, with a frame (or creator) in a package of this module.
func rdmamgrGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	// The caller's goroutine comes first.
	gs := strings.Split(string(buf), "\n\n")[1:]
	var out []string
	for _, g := range gs {
		for _, line := range strings.Split(g, "\n") {
			line = strings.TrimPrefix(line, "created by ")
			if strings.HasPrefix(line, "github.com/rdmamgr/rdmamgr/") {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// daemon is an `rdmamgr serve` child process.
type daemon struct {
	name   string
	cmd    *exec.Cmd
	addr   string // actor-system address
	pid    *protoactor.PID
	stderr *syncBuffer

	exited  chan struct{} // closed when Wait returned
	waitErr error         // set before exited is closed

	mu     sync.Mutex
	killed bool // SIGKILLed on purpose: its exit status is not checked

	stopOnce sync.Once
}

// syncBuffer is a bytes.Buffer safe for the child's stderr copier and the
// test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDaemons starts n daemons in parallel. One cleanup stops them all at
// once (SIGTERM; each must exit 0) when the test ends.
func startDaemons(t *testing.T, n int) []*daemon {
	t.Helper()
	return startAll(t, n, func(name string) (*daemon, error) { return spawnDaemon(name, "127.0.0.1:0") })
}

// startAll starts n daemons in parallel with start (named after the test),
// and registers one cleanup that stops every one that started, at once.
func startAll[D interface{ stop(*testing.T) }](t *testing.T, n int, start func(name string) (D, error)) []D {
	t.Helper()
	ds := make([]D, n)
	ok := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds[i], errs[i] = start(fmt.Sprintf("%s/d%d", t.Name(), i+1))
			ok[i] = errs[i] == nil
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for i, d := range ds {
			if !ok[i] {
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); d.stop(t) }()
		}
		wg.Wait()
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return ds
}

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	return startDaemons(t, 1)[0]
}

// spawnDaemon runs `rdmamgr serve --listen listen` with extra flags and
// waits for its "ready ADDR" line. A fixed listen port must come back as
// asked (a restarted daemon keeps its address).
func spawnDaemon(name, listen string, extra ...string) (*daemon, error) {
	level := "warn"
	if *verboseLogs {
		level = "debug"
	}
	args := append([]string{"serve", "--listen", listen, "--log-level", level}, extra...)
	cmd := exec.Command(rdmamgrBin, args...)
	d := &daemon{name: name, cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = d.stderr
	if *verboseLogs {
		cmd.Stderr = io.MultiWriter(d.stderr, prefixWriter(os.Stderr, name+": "))
	}
	// The daemon dies with the test process whatever happens.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start: %w", name, err)
	}
	ready := make(chan string, 1)
	go func() {
		// Read the ready line, then drain stdout so the daemon never
		// blocks on it; EOF when it exits.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				select {
				case ready <- strings.TrimSpace(addr):
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	select {
	case d.addr = <-ready:
	case <-d.exited:
		return nil, fmt.Errorf("%s exited before ready: %v\nstderr:\n%s", name, d.waitErr, d.stderr)
	case <-time.After(readyTimeout):
		_ = cmd.Process.Kill()
		<-d.exited
		return nil, fmt.Errorf("%s: no ready line\nstderr:\n%s", name, d.stderr)
	}
	if !strings.HasSuffix(listen, ":0") && d.addr != listen {
		d.mu.Lock()
		d.killed = true
		d.mu.Unlock()
		_ = cmd.Process.Kill()
		<-d.exited
		return nil, fmt.Errorf("%s: ready at %s, asked for %s", name, d.addr, listen)
	}
	d.pid = protoactor.NewPID(d.addr, actor.DefaultName)
	return d, nil
}

// kill SIGKILLs the daemon and waits for it to go.
func (d *daemon) kill(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	d.killed = true
	d.mu.Unlock()
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-d.exited:
	case <-time.After(exitTimeout):
		t.Fatalf("%s: still running after SIGKILL", d.name)
	}
}

// stop sends SIGTERM and requires a clean exit (status 0). Only the first
// call does anything.
func (d *daemon) stop(t *testing.T) {
	d.stopOnce.Do(func() { d.stop1(t) })
}

func (d *daemon) stop1(t *testing.T) {
	d.mu.Lock()
	killed := d.killed
	d.mu.Unlock()
	if !killed {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-d.exited:
	case <-time.After(exitTimeout):
		_ = d.cmd.Process.Kill()
		<-d.exited
		t.Errorf("%s: did not exit within %v of SIGTERM\nstderr:\n%s", d.name, exitTimeout, d.stderr)
		return
	}
	if !killed && d.waitErr != nil {
		t.Errorf("%s: exit after SIGTERM: %v\nstderr:\n%s", d.name, d.waitErr, d.stderr)
	}
}

func (d *daemon) client() *actor.Client { return local.client(d.pid) }

// prefixWriter prefixes each write with p (for --rdmamgr.logs).
func prefixWriter(w io.Writer, p string) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		_, err := w.Write(append([]byte(p), b...))
		return len(b), err
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
