package baseline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/rdmamgr/rdmamgr/bench"
	"github.com/rdmamgr/rdmamgr/internal/size"
)

// Sizes of the latency and pipeline measurements.
const (
	LatSize  = 8
	PipeSize = 64
	// SmallMax is the largest size Config.Inflight applies to.
	SmallMax = 4096
)

// Config is one comparison run. Its values are checked by the caller (the
// command line); Run trusts them.
type Config struct {
	Sizes       []uint64 // throughput table: every size ...
	Ops         []string // ... with every op ("put", "get")
	Count       int      // operations per size and op (0: AutoCount(size))
	Concurrency int      // our operations in flight
	// Inflight, when not 0, is how many of our operations are in flight
	// at sizes up to SmallMax, posted and reaped by one goroutine
	// (bench.Config.Ring), and the plain stream's slots there.
	Inflight int
	Warmup   int  // untimed operations before each measurement
	Verify   bool // check every byte of ours
	// SharedSlot: our operations in flight at sizes up to SmallMax share
	// one slot's bytes (bench.Config.SharedSlot).
	SharedSlot bool
	// SignalEvery: bench.Config.SignalEvery of our ring (sizes up to
	// SmallMax, and the pipeline).
	SignalEvery int
	Conns       int    // our connections per route, and the baseline's
	LatCount    int    // round trips timed for the latency
	PipeCount   int    // operations timed for the pipeline
	PipeDepth   int    // operations in flight in the pipeline
	Backend     string // our data plane, as reported (the measurements say what they used)
	// WantBackend, when not empty, is the route kind every measurement of
	// ours must have used (queuepair.QueuePair.Kind): one that used
	// another ends the run with ErrWrongBackend.
	WantBackend string
	// Against is what ours is compared with: AgainstTCP ("" too) or
	// AgainstMemcpy.
	Against string
	// Memory gives the two buffers of the memcpy baseline (nil: Go
	// slices); release gives them back.
	Memory    Memory
	Placement Placement
	// Where the manager and the baseline server are, for the header; the
	// External flags say bench did not start (nor pin) them.
	ManagerAddr, ServerAddr         string
	ExternalManager, ExternalServer bool
}

// Ours measures our side: one bench.Run against the manager.
type Ours func(ctx context.Context, cfg bench.Config) (*bench.Result, error)

// AutoCount is the operation count of a size when Config.Count is 0:
// about 2 GiB per measurement, at least 100 and at most 50,000 operations.
func AutoCount(size uint64) int {
	return int(min(max((2<<30)/size, 100), 50000))
}

// Run measures ours (through ours) and the plain-TCP baseline (the server
// at cfg.ServerAddr), prints the table and lines to w as it goes, ending
// with "errors: N", and returns the report. A measurement that cannot be
// made ends the run with an error and no report; operations of ours that
// failed or moved wrong bytes are counted in the report and returned as
// an error joining them once the run is complete.
func Run(ctx context.Context, cfg Config, ours Ours, w io.Writer) (*Report, error) {
	if cfg.Against == "" {
		cfg.Against = AgainstTCP
	}
	r := &runner{cfg: cfg, ours: ours, w: w, rep: &Report{
		Against: cfg.Against, Placement: cfg.Placement.Mode, BenchCPU: cfg.Placement.BenchCPU, ServerCPU: cfg.Placement.ServerCPU,
		GOMAXPROCS: runtime.GOMAXPROCS(0), Backend: cfg.Backend, Conns: cfg.Conns, Concurrency: cfg.Concurrency, Inflight: cfg.Inflight, SignalEvery: cfg.SignalEvery,
		Warmup: cfg.Warmup, Verify: cfg.Verify, Started: time.Now(),
	}}
	r.header()
	for _, sz := range cfg.Sizes {
		for _, op := range cfg.Ops {
			if err := r.throughput(ctx, op, sz); err != nil {
				return nil, fmt.Errorf("%s %s: %w", op, size.Exact(sz), err)
			}
		}
	}
	if err := r.latency(ctx); err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	if cfg.Against == AgainstTCP {
		if err := r.pipeline(ctx); err != nil {
			return nil, fmt.Errorf("pipeline: %w", err)
		}
	}
	r.rep.Elapsed = time.Since(r.rep.Started)
	fmt.Fprintf(w, "route backend: %s\n", r.rep.Backend)
	fmt.Fprintf(w, "errors: %d\n", r.rep.Errors())
	return r.rep, errors.Join(r.failures...)
}

// runner is one Run's state.
type runner struct {
	cfg      Config
	ours     Ours
	w        io.Writer
	rep      *Report
	failures []error
}

func (r *runner) header() {
	c := r.cfg
	if c.Against == AgainstMemcpy {
		r.memcpyHeader()
		return
	}
	fmt.Fprintf(r.w, "placement: %s\n", c.Placement.Describe(c.ExternalManager, c.ExternalServer))
	fmt.Fprintf(r.w, "manager %s, baseline server %s; conns=%d concurrency=%d warmup=%d GOMAXPROCS=%d verify=%v\n",
		c.ManagerAddr, c.ServerAddr, c.Conns, c.Concurrency, c.Warmup, r.rep.GOMAXPROCS, c.Verify)
	fmt.Fprintf(r.w, "ratio = ours / plain TCP (stream of the same operations over the same %d connections)\n", c.Conns)
	r.tableHeader("plain TCP")
}

// tableHeader prints the throughput table's column names, the baseline's
// called base.
func (r *runner) tableHeader(base string) {
	if r.cfg.Inflight > 0 {
		fmt.Fprintf(r.w, "in flight: %d at sizes up to %s (one goroutine posts and reaps them), %d above\n",
			r.cfg.Inflight, size.Exact(SmallMax), r.cfg.Concurrency)
		if r.cfg.SignalEvery > 1 {
			fmt.Fprintf(r.w, "selective signaling there: every %dth operation of a chain and its last signaled (--signal-every)\n", r.cfg.SignalEvery)
		}
	}
	fmt.Fprintf(r.w, "%-7s %-4s %8s %7s %12s %12s %16s %16s %7s\n", "size", "op", "inflight", "count",
		"ours MiB/s", "ours ops/s", base+" MiB/s", base+" ops/s", "ratio")
}

// inflight is how many of ours are in flight at size sz, and whether one
// goroutine keeps them so (the ring).
func (r *runner) inflight(sz uint64) (int, bool) {
	if r.cfg.Inflight > 0 && sz <= SmallMax {
		return r.cfg.Inflight, true
	}
	return r.cfg.Concurrency, false
}

// measure runs ours; a run that stopped early is an error.
func (r *runner) measure(ctx context.Context, cfg bench.Config) (*bench.Result, error) {
	res, err := r.ours(ctx, cfg)
	switch {
	case err != nil:
	case res.Stop != nil:
		err = fmt.Errorf("stopped after %d operations: %w", res.Ops, res.Stop)
	case r.cfg.WantBackend != "" && res.Backend != r.cfg.WantBackend:
		err = fmt.Errorf("%w: the route uses %q, asked for %q", ErrWrongBackend, res.Backend, r.cfg.WantBackend)
	}
	return res, err
}

// note records the failed and wrong operations of a measurement of ours
// and returns their number.
func (r *runner) note(what string, res *bench.Result) int {
	if res.Errs > 0 {
		r.failures = append(r.failures, fmt.Errorf("%s: %d operations failed; first: %w", what, res.Errs, res.FirstErr))
	}
	if res.Mismatch > 0 {
		r.failures = append(r.failures, fmt.Errorf("%s: %d operations moved wrong bytes", what, res.Mismatch))
	}
	return res.Errs + res.Mismatch
}

// throughput measures one row of the table: ours, then the baseline (the
// TCP stream or the memcpy).
func (r *runner) throughput(ctx context.Context, op string, sz uint64) error {
	c := r.cfg
	count := c.Count
	if count == 0 {
		count = AutoCount(sz)
	}
	conc, ring := r.inflight(sz)
	res, err := r.measure(ctx, bench.Config{Op: op, Size: sz, Count: count, Concurrency: conc, Ring: ring, Warmup: c.Warmup, Verify: c.Verify,
		SharedSlot: c.SharedSlot && ring, SignalEvery: c.SignalEvery})
	if err != nil {
		return err
	}
	if res.Backend != "" {
		r.rep.Backend = res.Backend
	}
	row := Row{
		Size: size.Exact(sz), SizeBytes: sz, Op: op, Count: count, Inflight: conc,
		Ours:      bench.MiBPerSec(res.Bytes, res.Elapsed),
		OursOps:   bench.PerSec(res.Ops, res.Elapsed),
		OursP50us: bench.Micros(bench.Percentile(res.Lat, 50)),
		Errors:    r.note(op+" "+size.Exact(sz), res),
	}
	base, baseOps := &row.TCP, &row.TCPOps
	var d time.Duration
	if c.Against == AgainstMemcpy {
		base, baseOps = &row.Memcpy, &row.MemcpyOps
		d, err = r.memcpy(ctx, sz, count)
	} else {
		d, err = Stream(ctx, c.ServerAddr, op, Load{Size: sz, Count: count, Warmup: c.Warmup, Conns: c.Conns, Slots: conc})
	}
	if err != nil {
		return err
	}
	*base, *baseOps = bench.MiBPerSec(sz*uint64(count), d), bench.PerSec(uint64(count), d)
	row.Ratio = ratio(row.Ours, *base)
	r.rep.Throughput = append(r.rep.Throughput, row)
	fmt.Fprintf(r.w, "%-7s %-4s %8d %7d %12.1f %12.0f %16.1f %16.0f %7.2f\n",
		row.Size, row.Op, row.Inflight, row.Count, row.Ours, row.OursOps, *base, *baseOps, row.Ratio)
	return nil
}

// latency measures an 8-byte Get round trip against a ping-pong on one
// connection.
func (r *runner) latency(ctx context.Context) error {
	c := r.cfg
	warm := max(c.Warmup, 100)
	res, err := r.measure(ctx, bench.Config{Op: "get", Size: LatSize, Count: c.LatCount, Concurrency: 1, Warmup: warm, Verify: c.Verify})
	if err != nil {
		return err
	}
	if c.Against == AgainstMemcpy {
		r.latencyAlone(res)
		return nil
	}
	lat, err := PingPong(ctx, c.ServerAddr, Load{Size: LatSize, Count: c.LatCount, Warmup: warm})
	if err != nil {
		return err
	}
	p50, p99 := bench.Percentile(res.Lat, 50), bench.Percentile(res.Lat, 99)
	t50, t99 := bench.Percentile(lat, 50), bench.Percentile(lat, 99)
	lr := &LatencyRow{
		Size: LatSize, Count: c.LatCount,
		OursP50: bench.Micros(p50), OursP99: bench.Micros(p99), TCPP50: bench.Micros(t50), TCPP99: bench.Micros(t99),
		Errors: r.note("latency get 8B", res),
	}
	lr.RatioP50 = ratio(lr.OursP50, lr.TCPP50)
	lr.timedBy()
	r.rep.Latency = lr
	fmt.Fprintf(r.w, "latency: %dB get, one at a time, n=%d: ours p50 %s p99 %s; plain TCP ping-pong p50 %s p99 %s; ratio p50 %.2f%s\n",
		LatSize, c.LatCount, fmtLat(p50), fmtLat(p99), fmtLat(t50), fmtLat(t99), lr.RatioP50, lr.clockNote())
	return nil
}

// pipeline measures 64-byte Puts, many in flight, against a
// request/response pipeline.
func (r *runner) pipeline(ctx context.Context) error {
	c := r.cfg
	warm := max(c.Warmup, c.PipeDepth)
	res, err := r.measure(ctx, bench.Config{Op: "put", Size: PipeSize, Count: c.PipeCount, Concurrency: c.PipeDepth, Ring: true, Warmup: warm, Verify: c.Verify,
		SignalEvery: c.SignalEvery})
	if err != nil {
		return err
	}
	d, err := Pipeline(ctx, c.ServerAddr, Load{Size: PipeSize, Count: c.PipeCount, Warmup: warm, Conns: c.Conns, Depth: c.PipeDepth})
	if err != nil {
		return err
	}
	pr := &PipelineRow{
		Size: PipeSize, Count: c.PipeCount, Depth: c.PipeDepth, Conns: c.Conns,
		OursOps: bench.PerSec(res.Ops, res.Elapsed), TCPOps: float64(c.PipeCount) / d.Seconds(),
		OursP50: bench.Micros(bench.Percentile(res.Lat, 50)),
		Errors:  r.note("pipeline put 64B", res),
	}
	pr.Ratio = ratio(pr.OursOps, pr.TCPOps)
	r.rep.Pipeline = pr
	fmt.Fprintf(r.w, "pipeline: %dB put, %d in flight, conns=%d, n=%d: ours %.0f ops/s; plain TCP pipeline %.0f ops/s; ratio %.2f\n",
		PipeSize, c.PipeDepth, c.Conns, c.PipeCount, pr.OursOps, pr.TCPOps, pr.Ratio)
	return nil
}
