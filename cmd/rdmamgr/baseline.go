package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
)

// `rdmamgr bench --baseline` measures our Put/Get against a plain Go TCP
// baseline in the same run: for every size and op our figure (a manager in
// this process moving data to/from a `rdmamgr serve` child) and then the
// baseline's (a stream over the same number of connections to a
// `rdmamgr bench baseline-server` child), then an 8-byte Get round trip
// against a TCP ping-pong and 64-byte Puts with many in flight against a
// TCP request/response pipeline. Ratios are ours / plain TCP.

// baselineFlags are the flags of bench that only --baseline uses.
type baselineFlags struct {
	on           bool
	sizes        string
	ops          string
	placement    string
	baselinePeer string
	latCount     int
	pipeCount    int
	pipeDepth    int
}

var baselineOnlyFlags = []string{"sizes", "ops", "placement", "baseline-peer", "lat-count", "pipeline-count", "pipeline-depth"}

func (b *baselineFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&b.on, "baseline", false, "run the size × op table, an 8-byte Get latency and a 64-byte Put pipeline, each against a plain Go TCP baseline, and print the ratios (starts its own manager unless --peer is given)")
	fs.StringVar(&b.sizes, "sizes", "4KiB,64KiB,1MiB,16MiB", "with --baseline: comma-separated sizes")
	fs.StringVar(&b.ops, "ops", "put,get", "with --baseline: comma-separated ops (put, get)")
	fs.StringVar(&b.placement, "placement", "any", "with --baseline: any (no pinning), same (bench and servers on one CPU) or split (bench on one CPU, servers on another)")
	fs.StringVar(&b.baselinePeer, "baseline-peer", "", "with --baseline: HOST:PORT of a running \"rdmamgr bench baseline-server\" (default: start one)")
	fs.IntVar(&b.latCount, "lat-count", 5000, "with --baseline: round trips timed for the 8-byte latency")
	fs.IntVar(&b.pipeCount, "pipeline-count", 100000, "with --baseline: operations timed for the 64-byte pipeline")
	fs.IntVar(&b.pipeDepth, "pipeline-depth", 64, "with --baseline: operations in flight in the 64-byte pipeline")
}

func (b *baselineFlags) checkUnset(set map[string]bool) error {
	for _, n := range baselineOnlyFlags {
		if set[n] {
			return usagef("--%s needs --baseline", n)
		}
	}
	return nil
}

// benchBaselineArgs are bench's common flags as --baseline sees them; set
// holds the names of the flags given on the command line.
type benchBaselineArgs struct {
	peer, peerName, listen string
	count, concurrency     int
	warmup                 int
	verify                 bool
	timeout                time.Duration
	jsonPath               string
	set                    map[string]bool
	c                      *common
}

const (
	baselineDefaultConc = 4
	latSize             = 8
	pipeSize            = 64
	childReadyTimeout   = 60 * time.Second
	childStopTimeout    = 15 * time.Second
)

// autoCount is the operation count of a size when --count is not given:
// about 2 GiB per measurement, at least 100 and at most 50,000 operations.
func autoCount(size uint64) int {
	return int(min(max((2<<30)/size, 100), 50000))
}

// benchReport is what --json writes.
type benchReport struct {
	Placement   string        `json:"placement"`
	BenchCPU    int           `json:"bench_cpu"`  // -1: not pinned
	ServerCPU   int           `json:"server_cpu"` // -1: not pinned
	GOMAXPROCS  int           `json:"gomaxprocs"`
	Backend     string        `json:"backend"`
	Conns       int           `json:"conns"`
	Concurrency int           `json:"concurrency"`
	Warmup      int           `json:"warmup"`
	Verify      bool          `json:"verify"`
	Throughput  []benchRow    `json:"throughput"`
	Latency     *latencyRow   `json:"latency,omitempty"`
	Pipeline    *pipelineRow  `json:"pipeline,omitempty"`
	Started     time.Time     `json:"started"`
	Elapsed     time.Duration `json:"elapsed_ns"`
}

type benchRow struct {
	Size      string  `json:"size"`
	SizeBytes uint64  `json:"size_bytes"`
	Op        string  `json:"op"`
	Count     int     `json:"count"`
	Ours      float64 `json:"ours_mib_s"`
	TCP       float64 `json:"tcp_mib_s"`
	Ratio     float64 `json:"ratio"`
	OursP50us float64 `json:"ours_p50_us"`
	Errors    int     `json:"errors"`
}

type latencyRow struct {
	Size     uint64  `json:"size_bytes"`
	Count    int     `json:"count"`
	OursP50  float64 `json:"ours_p50_us"`
	OursP99  float64 `json:"ours_p99_us"`
	TCPP50   float64 `json:"tcp_p50_us"`
	TCPP99   float64 `json:"tcp_p99_us"`
	RatioP50 float64 `json:"ratio_p50"`
	Errors   int     `json:"errors"`
}

type pipelineRow struct {
	Size    uint64  `json:"size_bytes"`
	Count   int     `json:"count"`
	Depth   int     `json:"depth"`
	Conns   int     `json:"conns"`
	OursOps float64 `json:"ours_ops_s"`
	TCPOps  float64 `json:"tcp_ops_s"`
	Ratio   float64 `json:"ratio"`
	OursP50 float64 `json:"ours_p50_us"`
	Errors  int     `json:"errors"`
}

func cmdBenchBaseline(ctx context.Context, bl *baselineFlags, a benchBaselineArgs, e *env) error {
	stdout, stderr := e.stdout, e.stderr
	if a.jsonPath == "-" {
		stdout = io.Discard // stdout carries the JSON alone
	}
	if a.set["op"] || a.set["size"] {
		return usagef("with --baseline use --ops and --sizes, not --op and --size")
	}
	sizes, err := parseSizeList(bl.sizes)
	if err != nil {
		return err
	}
	ops, err := parseOpList(bl.ops)
	if err != nil {
		return err
	}
	conc := a.concurrency
	if !a.set["concurrency"] {
		conc = baselineDefaultConc
	}
	switch {
	case a.count < 1 || conc < 1 || conc > 4096 || a.warmup < 0:
		return usagef("--count and --concurrency must be positive (concurrency at most 4096)")
	case bl.latCount < 1 || bl.pipeCount < 1:
		return usagef("--lat-count and --pipeline-count must be positive")
	case bl.pipeDepth < 1 || bl.pipeDepth > 4096:
		return usagef("--pipeline-depth %d: want 1..4096", bl.pipeDepth)
	case a.c.conns < 1:
		return usagef("--conns %d: want at least 1", a.c.conns)
	}
	for _, s := range sizes {
		if s*uint64(conc) > 8<<30 {
			return usagef("--sizes %s × --concurrency over 8 GiB", fmtSize(s))
		}
	}
	// The baseline is TCP; so is our data plane unless asked otherwise.
	if a.c.backend == "auto" {
		a.c.backend = "tcp"
	}
	pl, err := planPlacement(bl.placement)
	if err != nil {
		return err
	}
	if a.peer != "" {
		if _, err := peerPID(a.peer, a.peerName); err != nil {
			return err
		}
	}
	if bl.baselinePeer != "" {
		if _, _, err := splitHostPort(bl.baselinePeer); err != nil {
			return usagef("--baseline-peer %q: want HOST:PORT", bl.baselinePeer)
		}
	}
	_, sl, err := a.c.logger(stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()

	if pl.benchCPU >= 0 {
		if err := pinSelf(pl.benchCPU); err != nil {
			return err
		}
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(1)
		}
	}
	exe, err := os.Executable()
	if err != nil && (a.peer == "" || bl.baselinePeer == "") {
		return fmt.Errorf("find own executable to start the servers: %w", err)
	}
	var children []*child
	defer func() {
		for i := len(children) - 1; i >= 0; i-- {
			if err := children[i].stop(); err != nil {
				fmt.Fprintf(stderr, "rdmamgr bench: %v\n", err)
			}
		}
	}()
	peerAddr := a.peer
	if peerAddr == "" {
		args := []string{"serve", "--listen", "127.0.0.1:0",
			"--backend", a.c.backend, "--conns", strconv.Itoa(a.c.conns),
			"--max-message-size", strconv.Itoa(a.c.maxMsg), "--log-level", "warn", "--metrics-listen", ""}
		if a.c.sockbuf != "" {
			args = append(args, "--sockbuf", a.c.sockbuf)
		}
		ch, err := startChild(ctx, "manager", exe, args, pl.serverCPU, stderr)
		if err != nil {
			return err
		}
		children = append(children, ch)
		peerAddr = ch.addr
	}
	blAddr := bl.baselinePeer
	if blAddr == "" {
		ch, err := startChild(ctx, "baseline server", exe, []string{"bench", "baseline-server", "--listen", "127.0.0.1:0"}, pl.serverCPU, stderr)
		if err != nil {
			return err
		}
		children = append(children, ch)
		blAddr = ch.addr
	}
	pid, err := peerPID(peerAddr, a.peerName)
	if err != nil {
		return err
	}
	lis, err := replyListen(a.listen, peerAddr)
	if err != nil {
		return err
	}
	n, err := startNode(ctx, lis, a.c, sl, actor.DefaultName, true)
	if err != nil {
		return err
	}
	defer n.Close()
	peer := actor.NewClient(n.System(), pid)

	rep := &benchReport{
		Placement: pl.mode, BenchCPU: pl.benchCPU, ServerCPU: pl.serverCPU, GOMAXPROCS: runtime.GOMAXPROCS(0),
		Backend: a.c.backend, Conns: a.c.conns, Concurrency: conc, Warmup: a.warmup, Verify: a.verify,
		Started: time.Now(),
	}
	fmt.Fprintf(stdout, "placement: %s\n", pl.describe(a.peer != "", bl.baselinePeer != ""))
	fmt.Fprintf(stdout, "manager %s, baseline server %s; conns=%d concurrency=%d warmup=%d GOMAXPROCS=%d verify=%v\n",
		peerAddr, blAddr, a.c.conns, conc, a.warmup, rep.GOMAXPROCS, a.verify)
	fmt.Fprintf(stdout, "ratio = ours / plain TCP (stream of the same operations over the same %d connections)\n", a.c.conns)
	fmt.Fprintf(stdout, "%-7s %-4s %7s %12s %16s %7s\n", "size", "op", "count", "ours MiB/s", "plain TCP MiB/s", "ratio")

	var failures []error
	noteFailure := func(what string, r *benchResult) int {
		if r.errs > 0 {
			failures = append(failures, fmt.Errorf("%s: %d operations failed; first: %w", what, r.errs, r.firstErr))
		}
		if r.mismatch > 0 {
			failures = append(failures, fmt.Errorf("%s: %d operations moved wrong bytes", what, r.mismatch))
		}
		return r.errs + r.mismatch
	}
	for _, size := range sizes {
		for _, op := range ops {
			count := a.count
			if !a.set["count"] {
				count = autoCount(size)
			}
			what := fmt.Sprintf("%s %s", op, fmtSize(size))
			cfg := benchConfig{op: op, size: size, count: count, concurrency: conc, warmup: a.warmup, verify: a.verify}
			res, err := runBench(ctx, n.Manager(), peer, cfg)
			if err == nil && res.stop != nil {
				err = fmt.Errorf("stopped after %d operations: %w", res.ops, res.stop)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if rep.Backend != res.backend && res.backend != "" {
				rep.Backend = res.backend
			}
			d, err := blStream(ctx, blAddr, op, size, count, a.warmup, a.c.conns)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			row := benchRow{
				Size: fmtSize(size), SizeBytes: size, Op: op, Count: count,
				Ours:      mibPerSec(res.bytes, res.elapsed),
				TCP:       mibPerSec(size*uint64(count), d),
				OursP50us: micros(pct(res.lat, 50)),
				Errors:    noteFailure(what, res),
			}
			row.Ratio = ratio(row.Ours, row.TCP)
			rep.Throughput = append(rep.Throughput, row)
			fmt.Fprintf(stdout, "%-7s %-4s %7d %12.1f %16.1f %7.2f\n", row.Size, row.Op, row.Count, row.Ours, row.TCP, row.Ratio)
		}
	}

	// 8-byte Get round trip against a ping-pong on one connection.
	latWarm := max(a.warmup, 100)
	res, err := runBench(ctx, n.Manager(), peer, benchConfig{op: "get", size: latSize, count: bl.latCount, concurrency: 1, warmup: latWarm, verify: a.verify})
	if err == nil && res.stop != nil {
		err = fmt.Errorf("stopped after %d operations: %w", res.ops, res.stop)
	}
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	lat, err := blPingPong(ctx, blAddr, latSize, bl.latCount, latWarm)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	lr := &latencyRow{
		Size: latSize, Count: bl.latCount,
		OursP50: micros(pct(res.lat, 50)), OursP99: micros(pct(res.lat, 99)),
		TCPP50: micros(pct(lat, 50)), TCPP99: micros(pct(lat, 99)),
		Errors: noteFailure("latency get 8B", res),
	}
	lr.RatioP50 = ratio(lr.OursP50, lr.TCPP50)
	rep.Latency = lr
	fmt.Fprintf(stdout, "latency: %dB get, one at a time, n=%d: ours p50 %s p99 %s; plain TCP ping-pong p50 %s p99 %s; ratio p50 %.2f\n",
		latSize, bl.latCount, fmtLat(pct(res.lat, 50)), fmtLat(pct(res.lat, 99)), fmtLat(pct(lat, 50)), fmtLat(pct(lat, 99)), lr.RatioP50)

	// 64-byte Puts, many in flight, against a request/response pipeline.
	res, err = runBench(ctx, n.Manager(), peer, benchConfig{op: "put", size: pipeSize, count: bl.pipeCount, concurrency: bl.pipeDepth, warmup: max(a.warmup, bl.pipeDepth), verify: a.verify})
	if err == nil && res.stop != nil {
		err = fmt.Errorf("stopped after %d operations: %w", res.ops, res.stop)
	}
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	d, err := blPipeline(ctx, blAddr, pipeSize, bl.pipeCount, bl.pipeDepth, max(a.warmup, bl.pipeDepth), a.c.conns)
	if err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	pr := &pipelineRow{
		Size: pipeSize, Count: bl.pipeCount, Depth: bl.pipeDepth, Conns: a.c.conns,
		OursOps: perSec(res.ops, res.elapsed), TCPOps: float64(bl.pipeCount) / d.Seconds(),
		OursP50: micros(pct(res.lat, 50)),
		Errors:  noteFailure("pipeline put 64B", res),
	}
	pr.Ratio = ratio(pr.OursOps, pr.TCPOps)
	rep.Pipeline = pr
	fmt.Fprintf(stdout, "pipeline: %dB put, %d in flight, conns=%d, n=%d: ours %.0f ops/s; plain TCP pipeline %.0f ops/s; ratio %.2f\n",
		pipeSize, bl.pipeDepth, a.c.conns, bl.pipeCount, pr.OursOps, pr.TCPOps, pr.Ratio)

	rep.Elapsed = time.Since(rep.Started)
	if a.jsonPath != "" {
		if err := writeJSON(e.stdout, a.jsonPath, rep); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "errors: %d\n", countErrors(rep))
	return errors.Join(failures...)
}

func countErrors(r *benchReport) int {
	n := 0
	for _, t := range r.Throughput {
		n += t.Errors
	}
	if r.Latency != nil {
		n += r.Latency.Errors
	}
	if r.Pipeline != nil {
		n += r.Pipeline.Errors
	}
	return n
}

func mibPerSec(bytes uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / (1 << 20) / d.Seconds()
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func fmtLat(d time.Duration) string {
	return d.Round(100 * time.Nanosecond).String()
}

func parseSizeList(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		v, err := parseSize(f)
		if err != nil {
			return nil, usagef("--sizes: %v", err)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, usagef("--sizes %q: want a comma-separated list of sizes", s)
	}
	return out, nil
}

func parseOpList(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(strings.ToLower(f))
		switch f {
		case "":
			continue
		case "put", "get":
			out = append(out, f)
		default:
			return nil, usagef("--ops: %q: want put or get", f)
		}
	}
	if len(out) == 0 {
		return nil, usagef("--ops %q: want put, get or put,get", s)
	}
	return out, nil
}

// placement says where bench and the servers it talks to run.
type placement struct {
	mode      string // any, same, split
	benchCPU  int    // -1: not pinned
	serverCPU int    // -1: not pinned
}

func planPlacement(mode string) (placement, error) {
	switch mode {
	case "any":
		return placement{mode: mode, benchCPU: -1, serverCPU: -1}, nil
	case "same", "split":
	default:
		return placement{}, usagef("--placement %q: want any, same or split", mode)
	}
	cpus, err := allowedCPUs()
	if err != nil {
		return placement{}, err
	}
	if len(cpus) == 0 {
		return placement{}, errors.New("no CPU in this process's affinity mask")
	}
	if mode == "same" {
		return placement{mode: mode, benchCPU: cpus[0], serverCPU: cpus[0]}, nil
	}
	if len(cpus) < 2 {
		return placement{}, usagef("--placement split needs two CPUs; this process may run on CPU %d only", cpus[0])
	}
	return placement{mode: mode, benchCPU: cpus[0], serverCPU: cpus[1]}, nil
}

// describe says in words where everything runs; extPeer and extBaseline
// are set when bench did not start (and so did not pin) that server.
func (p placement) describe(extPeer, extBaseline bool) string {
	var b strings.Builder
	switch p.mode {
	case "any":
		b.WriteString("any (no pinning; the scheduler places bench and the servers)")
	case "same":
		fmt.Fprintf(&b, "same (bench, manager and baseline server all on CPU %d)", p.benchCPU)
	case "split":
		fmt.Fprintf(&b, "split (bench on CPU %d; manager and baseline server on CPU %d)", p.benchCPU, p.serverCPU)
	}
	if extPeer && p.mode != "any" {
		b.WriteString("; the --peer manager was not started by bench and is not pinned")
	}
	if extBaseline && p.mode != "any" {
		b.WriteString("; the --baseline-peer server was not started by bench and is not pinned")
	}
	return b.String()
}

// child is a server process bench started; it printed "ready ADDR".
type child struct {
	name   string
	cmd    *exec.Cmd
	addr   string
	exited chan struct{}
	err    error // of cmd.Wait, set before exited is closed
}

// startChild starts exe args (pinned to cpu unless cpu < 0) and waits for
// its "ready ADDR" line. The child's stderr goes to stderr.
func startChild(ctx context.Context, name, exe string, args []string, cpu int, stderr io.Writer) (*child, error) {
	cmd, pinAfterStart := pinnedCommand(exe, args, cpu)
	cmd.Env = os.Environ()
	if cpu >= 0 && os.Getenv("GOMAXPROCS") == "" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS=1")
	}
	ready := make(chan string, 1)
	cmd.Stdout = &readyWatcher{ready: ready}
	cmd.Stderr = stderr
	cmd.SysProcAttr = childSysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	ch := &child{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		ch.err = cmd.Wait()
		close(ch.exited)
	}()
	if pinAfterStart {
		if err := pinProcess(cmd.Process.Pid, cpu); err != nil {
			ch.stop()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	t := time.NewTimer(childReadyTimeout)
	defer t.Stop()
	select {
	case ch.addr = <-ready:
		return ch, nil
	case <-ch.exited:
		return nil, fmt.Errorf("%s (%s) exited before it was ready: %v", name, strings.Join(cmd.Args, " "), ch.err)
	case <-t.C:
		ch.stop()
		return nil, fmt.Errorf("%s (%s) not ready within %v", name, strings.Join(cmd.Args, " "), childReadyTimeout)
	case <-ctx.Done():
		ch.stop()
		return nil, fmt.Errorf("start %s: %w", name, ctx.Err())
	}
}

// stop sends SIGTERM, and SIGKILL if the child has not exited in time.
func (c *child) stop() error {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(childStopTimeout)
		defer t.Stop()
		select {
		case <-c.exited:
		case <-t.C:
			_ = c.cmd.Process.Kill()
			<-c.exited
			return fmt.Errorf("%s did not exit within %v of SIGTERM; killed", c.name, childStopTimeout)
		}
	}
	if c.err != nil {
		return fmt.Errorf("%s: %w", c.name, c.err)
	}
	return nil
}

// readyWatcher is a child's stdout: it hands on the address of the first
// "ready ADDR" line and discards the rest.
type readyWatcher struct {
	mu    sync.Mutex
	line  []byte
	sent  bool
	ready chan<- string
}

func (w *readyWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sent {
		return len(p), nil
	}
	w.line = append(w.line, p...)
	for {
		i := strings.IndexByte(string(w.line), '\n')
		if i < 0 {
			if len(w.line) > 4096 {
				w.line = w.line[:0]
			}
			return len(p), nil
		}
		l := strings.TrimSpace(string(w.line[:i]))
		w.line = w.line[i+1:]
		if addr, ok := strings.CutPrefix(l, "ready "); ok {
			w.sent = true
			w.ready <- strings.TrimSpace(addr)
			return len(p), nil
		}
	}
}
