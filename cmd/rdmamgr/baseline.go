package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/bench"
	"github.com/rdmamgr/rdmamgr/bench/baseline"
	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// `rdmamgr bench --baseline`: its flags, and the processes it starts (a
// `rdmamgr serve` and a `rdmamgr baseline-server`, placed on CPUs as
// --placement says); package bench/baseline measures and prints.

// baselineDefaultConc is --concurrency with --baseline when not given,
// baselineDefaultInflight --inflight (at sizes up to 4 KiB).
const (
	baselineDefaultConc     = 16
	baselineDefaultInflight = 64
)

// benchBaseline runs bench --baseline; set holds the names of the flags
// given on the command line.
func benchBaseline(ctx context.Context, e *env, a *benchArgs, set map[string]bool) error {
	stdout := e.stdout
	if a.jsonPath == "-" {
		stdout = io.Discard // stdout carries the JSON alone
	}
	cfg, err := a.baselineConfig(set)
	if err != nil {
		return err
	}
	_, sl, err := a.c.logger(e.stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if err := cfg.Placement.PinBench(); err != nil {
		return err
	}
	servers, err := a.startBaselineServers(ctx, &cfg, e.stderr)
	defer stopAll(servers, e.stderr)
	if err != nil {
		return err
	}
	if a.bl.procs > 0 {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		return benchProcs(ctx, e, a, cfg, exe, stdout)
	}
	pid, err := peerPID(cfg.ManagerAddr, a.peerName)
	if err != nil {
		return err
	}
	lis, err := replyListen(a.listen, cfg.ManagerAddr)
	if err != nil {
		return err
	}
	n, err := startNode(ctx, lis, &a.c, sl, actor.DefaultName, true)
	if err != nil {
		return err
	}
	defer n.Close()
	peer := actor.NewClient(n.System(), pid)
	cfg.Memory = managerMemory(n.Manager())
	ours := func(ctx context.Context, c bench.Config) (*bench.Result, error) {
		return bench.Run(ctx, n.Manager(), peer, c)
	}
	rep, err := baseline.Run(ctx, cfg, ours, stdout)
	if rep != nil && a.jsonPath != "" {
		if jerr := writeJSON(e.stdout, a.jsonPath, rep); jerr != nil {
			return jerr
		}
	}
	return err
}

// baselineConfig checks bench's flags for --baseline and returns the run's
// configuration and placement (the servers' addresses still to come).
func (a *benchArgs) baselineConfig(set map[string]bool) (baseline.Config, error) {
	bl := &a.bl
	if set["op"] || set["size"] {
		return baseline.Config{}, usagef("with --baseline use --ops and --sizes, not --op and --size")
	}
	against, err := bl.resolveAgainst(a.c.backend, set)
	if err != nil {
		return baseline.Config{}, err
	}
	memcpy := against == baseline.AgainstMemcpy
	if memcpy && !set["sizes"] {
		bl.sizes = sameHostSizes
	}
	if a.sharedSlot && a.verify {
		return baseline.Config{}, usagef("--shared-slot moves the same bytes with every operation in flight: not with --verify")
	}
	if a.signalEvery < 0 {
		return baseline.Config{}, usagef("--signal-every %d: want 0 or more", a.signalEvery)
	}
	if bl.procs < 0 || bl.procs > 64 {
		return baseline.Config{}, usagef("--procs %d: want 1 to 64", bl.procs)
	}
	if bl.procs > 0 && !set["sizes"] {
		bl.sizes = procsSizes
	}
	sizes, err := parseSizeList(bl.sizes)
	if err != nil {
		return baseline.Config{}, err
	}
	ops, err := parseOpList(bl.ops)
	if err != nil {
		return baseline.Config{}, err
	}
	cfg := baseline.Config{Sizes: sizes, Ops: ops, Count: a.count, Concurrency: a.concurrency, Warmup: a.warmup, Verify: a.verify,
		Conns: a.c.conns, LatCount: bl.latCount, PipeCount: bl.pipeCount, PipeDepth: bl.pipeDepth, Against: against}
	cfg.Inflight = a.inflight
	cfg.SharedSlot = a.sharedSlot
	cfg.SignalEvery = a.signalEvery
	if !set["inflight"] {
		cfg.Inflight = baselineDefaultInflight
	}
	if !set["concurrency"] {
		cfg.Concurrency = baselineDefaultConc
		if memcpy {
			cfg.Concurrency = 1 // one stream against one copying thread
		}
	}
	if err := checkBaselineCounts(cfg, a.count); err != nil {
		return baseline.Config{}, err
	}
	if !set["count"] {
		cfg.Count = 0 // per size
	}
	// Against TCP our data plane is TCP too, unless asked otherwise.
	if a.c.backend == "auto" && !memcpy {
		a.c.backend = "tcp"
	}
	cfg.Backend = a.c.backend
	if a.c.backend != "auto" {
		cfg.WantBackend = a.c.backend // the routes must be of it
	}
	if cfg.Placement, err = baseline.PlanPlacement(bl.placement); err != nil {
		return baseline.Config{}, asUsage(err)
	}
	return cfg, a.checkBaselinePeers()
}

// checkBaselineCounts checks the counts, depths and sizes of cfg.
func checkBaselineCounts(cfg baseline.Config, count int) error {
	switch {
	case count < 1 || cfg.Concurrency < 1 || cfg.Concurrency > 4096 || cfg.Warmup < 0:
		return usagef("--count and --concurrency must be positive (concurrency at most 4096)")
	case cfg.Inflight < 0 || cfg.Inflight > 4096:
		return usagef("--inflight %d: want 0 to 4096", cfg.Inflight)
	case cfg.LatCount < 1 || cfg.PipeCount < 1:
		return usagef("--lat-count and --pipeline-count must be positive")
	case cfg.PipeDepth < 1 || cfg.PipeDepth > 4096:
		return usagef("--pipeline-depth %d: want 1..4096", cfg.PipeDepth)
	case cfg.Conns < 1:
		return usagef("--conns %d: want at least 1", cfg.Conns)
	}
	for _, s := range cfg.Sizes {
		if s*uint64(cfg.Concurrency) > 8<<30 {
			return usagef("--sizes %s × --concurrency over 8 GiB", fmtSize(s))
		}
	}
	return nil
}

// checkBaselinePeers checks --peer and --baseline-peer, when given.
func (a *benchArgs) checkBaselinePeers() error {
	if a.peer != "" {
		if _, err := peerPID(a.peer, a.peerName); err != nil {
			return err
		}
	}
	if a.bl.baselinePeer != "" {
		if _, _, err := splitHostPort(a.bl.baselinePeer); err != nil {
			return usagef("--baseline-peer %q: want HOST:PORT", a.bl.baselinePeer)
		}
	}
	return nil
}

// startBaselineServers starts the manager (unless --peer) and the baseline
// server (unless --baseline-peer or --against memcpy) on the servers' CPU,
// and fills in their addresses. It returns the servers it started, also on failure.
func (a *benchArgs) startBaselineServers(ctx context.Context, cfg *baseline.Config, stderr io.Writer) ([]*proc.Proc, error) {
	cfg.ManagerAddr, cfg.ExternalManager = a.peer, a.peer != ""
	cfg.ServerAddr, cfg.ExternalServer = a.bl.baselinePeer, a.bl.baselinePeer != ""
	if cfg.ExternalManager && (cfg.ExternalServer || cfg.Against == baseline.AgainstMemcpy) {
		return nil, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable to start the servers: %w", err)
	}
	var started []*proc.Proc
	if !cfg.ExternalManager {
		p, err := cfg.Placement.StartServer(ctx, "manager", exe, a.managerArgs(), stderr)
		if err != nil {
			return started, err
		}
		started, cfg.ManagerAddr = append(started, p), p.Addr
	}
	if !cfg.ExternalServer && cfg.Against != baseline.AgainstMemcpy {
		p, err := cfg.Placement.StartServer(ctx, "baseline server", exe, []string{"baseline-server", "--listen", "127.0.0.1:0"}, stderr)
		if err != nil {
			return started, err
		}
		started, cfg.ServerAddr = append(started, p), p.Addr
	}
	return started, nil
}

// managerArgs is the command line of the manager bench --baseline starts.
func (a *benchArgs) managerArgs() []string {
	args := []string{"serve", "--listen", "127.0.0.1:0",
		"--backend", a.c.backend, "--conns", strconv.Itoa(a.c.conns),
		"--max-message-size", strconv.Itoa(a.c.maxMsg), "--log-level", "warn", "--metrics-listen", ""}
	if a.c.sockbuf != "" {
		args = append(args, "--sockbuf", a.c.sockbuf)
	}
	if a.c.secret != "" {
		args = append(args, "--secret-file", a.c.secret)
	}
	return args
}

// asUsage makes a configuration bench/baseline refuses a usage error.
func asUsage(err error) error {
	if errors.Is(err, baseline.ErrConfig) {
		return usageError{err}
	}
	return err
}

// stopAll stops the servers, the last started first.
func stopAll(ps []*proc.Proc, stderr io.Writer) {
	for i := len(ps) - 1; i >= 0; i-- {
		if err := ps[i].Stop(baseline.StopGrace); err != nil {
			fmt.Fprintf(stderr, "rdmamgr bench: %v\n", err)
		}
	}
}

func baselineServerCommand() *command {
	return &command{
		name:     "baseline-server",
		synopsis: "[--listen HOST:PORT]",
		short:    "serve the plain Go TCP baseline that bench --baseline measures against",
		long: `Serves the plain-TCP baseline protocol of 'rdmamgr bench --baseline' (package
bench/baseline): streams, ping-pongs and request/response pipelines over
nothing but Go's net package. Prints "ready ADDR" once it serves and runs until
interrupted. bench --baseline starts one itself (pinned as --placement says);
run one by hand to measure against another host with --baseline-peer.`,
		setup: func(fs *flag.FlagSet) runFunc {
			listen := fs.String("listen", "127.0.0.1:0", "address `HOST:PORT` (port 0 picks one)")
			return func(ctx context.Context, e *env) error { return baselineServer(ctx, e, *listen) }
		},
		interruptOK: true,
	}
}

// baselineServer serves the baseline protocol on listen until ctx ends.
func baselineServer(ctx context.Context, e *env, listen string) error {
	if _, _, err := splitHostPort(listen); err != nil {
		return usagef("--listen %q: want HOST:PORT", listen)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	s := baseline.NewServer(ln)
	defer s.Close()
	fmt.Fprintf(e.stdout, "ready %s\n", ln.Addr())
	if f, ok := e.stdout.(interface{ Sync() error }); ok {
		_ = f.Sync()
	}
	<-ctx.Done()
	return nil
}
