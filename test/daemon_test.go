//go:build linux

package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// daemon is an `rdmamgr serve` child process (internal/proc starts it and
// waits for its ready line).
type daemon struct {
	name   string
	p      *proc.Proc
	addr   string // actor-system address
	pid    *protoactor.PID
	stderr *proc.Buffer
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
	d, err := spawn(proc.Spec{Name: name, Path: rdmamgrBin, Args: args}, nil)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(listen, ":0") && d.addr != listen {
		_ = d.p.Kill()
		return nil, fmt.Errorf("%s: ready at %s, asked for %s", name, d.addr, listen)
	}
	return d, nil
}

// spawn starts the daemon s describes and waits for its ready line. Its
// stderr is kept in a buffer (and passed on with -rdmamgr.logs), or, when
// s.Stderr is set, goes there and keep is what the daemon's stderr says.
func spawn(s proc.Spec, keep *proc.Buffer) (*daemon, error) {
	if s.Stderr == nil {
		keep = &proc.Buffer{}
		s.Stderr = keep
		if *verboseLogs {
			s.Stderr = io.MultiWriter(keep, prefixWriter(os.Stderr, s.Name+": "))
		}
	}
	s.ReadyTimeout = readyTimeout
	p, err := proc.Start(context.Background(), s)
	if err != nil {
		return nil, fmt.Errorf("%w\nstderr:\n%s", err, keep)
	}
	return &daemon{name: s.Name, p: p, addr: p.Addr, pid: protoactor.NewPID(p.Addr, actor.DefaultName), stderr: keep}, nil
}

// kill SIGKILLs the daemon and waits for it to go.
func (d *daemon) kill(t *testing.T) {
	t.Helper()
	if err := d.p.Kill(); err != nil {
		t.Fatal(err)
	}
}

// stop sends SIGTERM and requires a clean exit (status 0; not after kill).
// Only the first call does anything.
func (d *daemon) stop(t *testing.T) {
	if err := d.p.Stop(exitTimeout); err != nil {
		t.Errorf("%v\nstderr:\n%s", err, d.stderr)
	}
}

func (d *daemon) client() *actor.Client { return local.client(d.pid) }

// runRdmamgr runs the rdmamgr CLI to its end (within timeout) and returns
// its stdout and stderr, and an error unless it exited 0.
func runRdmamgr(timeout time.Duration, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var o, e proc.Buffer
	err = proc.Run(ctx, proc.Spec{Name: "rdmamgr " + args[0], Path: rdmamgrBin, Args: args, Stdout: &o, Stderr: &e})
	return o.String(), e.String(), err
}

// prefixWriter prefixes each write with p (for -rdmamgr.logs).
func prefixWriter(w io.Writer, p string) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		_, err := w.Write(append([]byte(p), b...))
		return len(b), err
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
