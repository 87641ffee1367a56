//go:build linux

package test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/proc"
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

func TestMain(m *testing.M) {
	if code, ran := runAttacker(); ran { // a child process of an attack test
		os.Exit(code)
	}
	os.Exit(testMain(m))
}

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
	if err := proc.Build("github.com/rdmamgr/rdmamgr/cmd/rdmamgr", rdmamgrBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	local, err = startNode()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the test's node:", err)
		return 1
	}
	// Every remote of this process starts here, before any test talks
	// (theAttacker).
	if theAttacker, err = startAttacker(); err != nil {
		local.close()
		fmt.Fprintln(os.Stderr, "start the attacker:", err)
		return 1
	}
	code := m.Run()
	theAttacker.close()
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
	// TCP: these suites test the TCP data plane and the control plane
	// (hostile frames, served counters, kills); the daemons run the
	// default selection, and our routes to them stay TCP because we
	// choose. shm has suites of its own. Routes close with their last
	// queue pair (no linger): every test checks that it leaves no route.
	n, err := rnode.Start(ctx, rnode.Config{Logger: logger, Backend: backend.KindTCP, Manager: actor.Config{RouteLinger: -1}})
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
