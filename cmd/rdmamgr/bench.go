package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/bench"
	"github.com/rdmamgr/rdmamgr/buffer"
)

func benchCommand() *command {
	return &command{
		name:     "bench",
		synopsis: "--peer ADDR [--op put|get] [--size SIZE] [--count N] [--inflight N] [flags]\n       rdmamgr bench --baseline [--against tcp|memcpy] [--sizes LIST] [--ops put,get] [--placement any|same|split] [--procs N] [flags]",
		short:    "measure puts or gets to a manager (or, with --baseline, against plain Go TCP or memcpy)",
		long: `Moves data to (put) or from (get) the manager at --peer and reports throughput
and latency (p50, p99, p99.9, max) of the operations that succeeded. The run
stops when the peer is gone or more than --max-errors operations failed, and
then reports what it did. A progress line is shown when stdout is a terminal.
Interrupted (ctrl-C), it reports the partial figures and exits 130.

With --baseline it measures a table of sizes and ops, an 8-byte Get round
trip and a 64-byte Put pipeline, each against a plain Go TCP baseline in the
same run, and prints the ratios (starting its own manager unless --peer is
given). Every row has ops/s beside MiB/s; sizes up to 4KiB run --inflight
(default 64) operations in flight, posted in chains and reaped in batches
through a completion queue by one goroutine. With --procs N the table is N
bench processes against the one manager, their timed phases started
together, against N plain TCP streams: totals and the ratio. --json FILE
writes the figures of either mode as JSON ("-": stdout).

With --against memcpy (the default of --backend shm) the baseline of every
row is one thread copying between two buffers of the same size, the same
number of times, in the bench process: the bound of a same-host transfer.
The sizes default to 8B,4KiB,64KiB,1MiB,16MiB, one operation is in flight
unless --concurrency says otherwise, the latency line has our 8-byte Get
alone, and there is no pipeline. With --backend other than auto, a route of
another kind (a same-host peer that fell back to TCP) ends the run with an
error: the report's "route backend" is the one asked for.`,
		setup: benchFlags,
	}
}

// benchArgs are bench's flags after parsing.
type benchArgs struct {
	peer, peerName, listen string
	op, size               string
	count, concurrency     int
	inflight               int
	warmup, maxErrors      int
	verify, ring           bool
	sharedSlot             bool
	signalEvery            int
	startOnStdin           bool
	timeout                time.Duration
	cpuProfile, memProfile string
	jsonPath               string
	metricsListen          string
	memory                 string           // --memory
	loc                    buffer.Location  // --memory, parsed
	peerMemory             string           // --peer-memory
	peerLoc                *buffer.Location // --peer-memory, parsed; nil: loc
	bl                     baselineFlags
	c                      common
}

func benchFlags(fs *flag.FlagSet) runFunc {
	a := &benchArgs{}
	a.register(fs)
	return func(ctx context.Context, e *env) error {
		set := make(map[string]bool)
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if err := a.checkMemory(); err != nil {
			return err
		}
		if a.bl.on {
			return benchBaseline(ctx, e, a, set)
		}
		if err := a.bl.checkUnset(set); err != nil {
			return err
		}
		cfg, err := a.config()
		if err != nil {
			return err
		}
		return benchPeer(ctx, e, a, cfg)
	}
}

// register adds bench's flags to fs.
func (a *benchArgs) register(fs *flag.FlagSet) {
	fs.StringVar(&a.peer, "peer", "", "peer manager address `HOST:PORT`, or a member name with --etcd")
	fs.StringVar(&a.peerName, "peer-name", actor.DefaultName, "peer manager actor `name`")
	fs.StringVar(&a.listen, "listen", "", "our actor-system address `HOST:PORT` (default: the local address of the route to the peer, port 0)")
	fs.StringVar(&a.op, "op", "put", "`op`: put or get")
	fs.StringVar(&a.size, "size", "1MiB", "bytes per operation (`size`: KiB, MiB, GiB; kB, MB, GB)")
	fs.IntVar(&a.count, "count", 1000, "operations to time (with --baseline, per size: default enough for about 2 GiB, 100 to 50000)")
	fs.IntVar(&a.concurrency, "concurrency", 1, "operations in flight (with --baseline: default 16)")
	fs.IntVar(&a.warmup, "warmup", 10, "untimed operations first")
	fs.IntVar(&a.maxErrors, "max-errors", 0, "stop after more than this many failed operations")
	fs.BoolVar(&a.verify, "verify", false, "check every byte of every operation")
	fs.BoolVar(&a.sharedSlot, "shared-slot", false, "with --inflight: every operation in flight uses the same bytes of the buffers (as ucx_perftest's one buffer does), not a slot of its own; not with --verify")
	fs.IntVar(&a.signalEvery, "signal-every", 0, "with --inflight: selective signaling, as perftest's --cq-mod: in each chain posted only every `N`th operation and the last are signaled, the others unsignaled (reported through the completion queue only if they fail; a reaped signal vouches for every operation posted before it); 0 or 1: every operation signaled")
	fs.IntVar(&a.inflight, "inflight", 0, "operations in flight, posted in chains and reaped in batches through a completion queue by one goroutine (--ring --concurrency N); with --baseline: at sizes up to 4KiB, default 64 (0: --concurrency)")
	fs.BoolVar(&a.startOnStdin, "start-on-stdin", false, "after the warm-up print \""+startLine+"\" and wait for a line on stdin before the timed run (bench --procs starts its processes so)")
	fs.BoolVar(&a.ring, "ring", false, "one goroutine keeps --concurrency operations in flight through a completion queue: posted in chains, reaped in batches (default: one goroutine per operation in flight, each posting and waiting)")
	fs.DurationVar(&a.timeout, "timeout", 10*time.Minute, "bound on the whole run")
	fs.StringVar(&a.jsonPath, "json", "", "also write the figures as JSON to this `file` (\"-\": stdout, instead of the text)")
	fs.StringVar(&a.metricsListen, "metrics-listen", "", "serve /metrics of this run's manager on `HOST:PORT` (default: none)")
	fs.StringVar(&a.cpuProfile, "cpuprofile", "", "write a CPU profile of the timed run to this `file`")
	fs.StringVar(&a.memProfile, "memprofile", "", "write an allocation profile of the run to this `file`")
	fs.StringVar(&a.memory, "memory", "host", "where the buffers of each end are: host, or cuda[:N] for CUDA device N's memory (GPU buffers: the peer must be a serve --cuda daemon; refused with the reason where this machine has no CUDA driver or device; not with --verify or --baseline)")
	fs.StringVar(&a.peerMemory, "peer-memory", "", "where the peer's buffer is, if not where --memory says: host or cuda[:N] (GPU to host: --memory cuda --peer-memory host)")
	a.bl.register(fs)
	a.c.registerLog(fs, "warn")
	a.c.registerManager(fs)
}

// config checks the flags of a plain bench.
func (a *benchArgs) config() (bench.Config, error) {
	if a.peer == "" {
		return bench.Config{}, usagef("--peer is required (or --baseline)")
	}
	if a.op != "put" && a.op != "get" {
		return bench.Config{}, usagef("--op %q: want put or get", a.op)
	}
	size, err := parseSize(a.size)
	if err != nil {
		return bench.Config{}, usagef("--size: %v", err)
	}
	switch {
	case a.count < 1:
		return bench.Config{}, usagef("--count %d: want at least 1", a.count)
	case a.inflight != 0 && a.concurrency != 1:
		return bench.Config{}, usagef("--inflight N is --ring --concurrency N: give one of --inflight and --concurrency")
	case a.inflight < 0 || a.inflight > 4096:
		return bench.Config{}, usagef("--inflight %d: want 1 to 4096", a.inflight)
	case a.concurrency < 1 || a.concurrency > 4096:
		return bench.Config{}, usagef("--concurrency %d: want 1 to 4096", a.concurrency)
	case a.warmup < 0 || a.maxErrors < 0:
		return bench.Config{}, usagef("--warmup and --max-errors must not be negative")
	case a.sharedSlot && (a.verify || (a.inflight == 0 && !a.ring)):
		return bench.Config{}, usagef("--shared-slot needs --inflight (or --ring) and no --verify")
	case a.signalEvery < 0 || (a.signalEvery > 1 && a.inflight == 0 && !a.ring):
		return bench.Config{}, usagef("--signal-every %d: want 0 or more, with --inflight (or --ring)", a.signalEvery)
	case a.timeout <= 0:
		return bench.Config{}, usagef("--timeout %v: want a positive duration", a.timeout)
	case size*uint64(a.concurrency) > 8<<30:
		return bench.Config{}, usagef("--size × --concurrency over 8 GiB")
	}
	if a.inflight > 0 {
		a.concurrency, a.ring = a.inflight, true
	}
	return bench.Config{Op: a.op, Size: size, Count: a.count, Concurrency: a.concurrency, Ring: a.ring,
		Warmup: a.warmup, Verify: a.verify, SharedSlot: a.sharedSlot, SignalEvery: a.signalEvery, MaxErrors: a.maxErrors, ProgressEvery: progressEvery,
		Memory: a.loc, PeerMemory: a.peerLoc}, nil
}

// progressEvery is how often the progress line is rewritten.
var progressEvery = time.Second

// benchPeer runs a plain bench against --peer.
func benchPeer(ctx context.Context, e *env, a *benchArgs, cfg bench.Config) error {
	_, sl, err := a.c.logger(e.stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	pid, lis, err := a.c.net.peerAndListen(ctx, a.peer, a.peerName, a.listen, sl)
	if err != nil {
		return err
	}
	if err := probe(ctx, pid.Address, &a.c); err != nil {
		return err
	}
	if a.metricsListen != "" {
		a.c.metrics = actor.NewMetrics()
	}
	n, err := startNode(ctx, lis, &a.c, sl, actor.DefaultName, true)
	if err != nil {
		return err
	}
	defer closeWithin(n, 5*time.Second)
	unfollow, err := a.c.net.followCluster(n, sl)
	if err != nil {
		return err
	}
	defer unfollow()
	if a.metricsListen != "" {
		adm := newAdminServer(n.Manager(), metricsRegistry(n, a.c.metrics))
		if err := adm.listen(a.metricsListen); err != nil {
			return err
		}
		defer adm.close()
		fmt.Fprintf(e.stderr, "rdmamgr bench: metrics on http://%s/metrics\n", adm.Addr())
	}
	stopProfiles, err := startProfiles(a.cpuProfile, a.memProfile)
	if err != nil {
		return err
	}
	if e.tty && a.jsonPath != "-" && !a.startOnStdin {
		cfg.Progress = progressLine(e.stdout)
	}
	if a.startOnStdin {
		cfg.Start = waitStart(e.stdout)
	}
	res, err := bench.Run(ctx, n.Manager(), actor.NewClient(n.System(), pid), cfg)
	if cfg.Progress != nil {
		fmt.Fprint(e.stdout, "\r\033[K") // clear the progress line
	}
	if perr := stopProfiles(); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return hintSecret(err)
	}
	if err := reportBench(e, a, cfg, res); err != nil {
		return err
	}
	return benchOutcome(res)
}

// benchOutcome is the error (or nil) a finished run exits with.
func benchOutcome(res *bench.Result) error {
	var sc signalCause
	switch {
	case errors.As(res.Stop, &sc):
		return errInterrupted
	case errors.Is(res.Stop, context.DeadlineExceeded):
		return fmt.Errorf("--timeout ended the run after %d operations", res.Ops)
	case res.Stop != nil:
		return fmt.Errorf("stopped after %d operations: %v; first error: %w", res.Ops, res.Stop, hintSecret(res.FirstErr))
	case res.Errs > 0:
		return fmt.Errorf("%d operations failed; first: %w", res.Errs, hintSecret(res.FirstErr))
	case res.Mismatch > 0:
		return fmt.Errorf("%d operations moved wrong bytes", res.Mismatch)
	}
	return nil
}

// hintSecret adds what to do to an authentication failure.
func hintSecret(err error) error {
	if errors.Is(err, rdmamgr.ErrUnauthenticated) {
		return fmt.Errorf("%w (do both sides use the same --secret-file?)", err)
	}
	return err
}
