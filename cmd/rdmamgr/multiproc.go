package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rdmamgr/rdmamgr/bench"
	"github.com/rdmamgr/rdmamgr/bench/baseline"
	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// `rdmamgr bench --baseline --procs N`: N bench processes against one
// manager, their timed phases started together, against N plain streams
// (N × --conns connections to the baseline server) in the same run.

// procsDoc is what bench --baseline --procs --json writes.
type procsDoc struct {
	Procs     int       `json:"procs"`
	Placement string    `json:"placement"`
	Backend   string    `json:"backend"` // the children's routes' kind
	Conns     int       `json:"conns"`
	Verify    bool      `json:"verify"`
	Rows      []procRow `json:"throughput"`
}

// procRow is one size and op: the sums over the processes.
type procRow struct {
	Size       string  `json:"size"`
	SizeBytes  uint64  `json:"size_bytes"`
	Op         string  `json:"op"`
	Inflight   int     `json:"inflight"` // per process
	Count      int     `json:"count"`    // per process
	OursOps    float64 `json:"ours_ops_s"`
	OursMiB    float64 `json:"ours_mib_s"`
	TCPOps     float64 `json:"tcp_ops_s"`
	TCPMiB     float64 `json:"tcp_mib_s"`
	Ratio      float64 `json:"ratio"`
	Verified   uint64  `json:"verified_bytes"`
	Mismatches int     `json:"mismatches"`
	Errors     int     `json:"errors"`
}

// startLine is what a bench child started with --start-on-stdin prints
// once warmed up; it then waits for a line on stdin.
const startLine = "ready warmed-up"

// waitStart is the Start of a bench child: it says it is ready on stdout
// and waits for the word to go (a line, or the end of stdin).
func waitStart(stdout io.Writer) func(context.Context) error {
	return func(ctx context.Context) error {
		fmt.Fprintln(stdout, startLine)
		if f, ok := stdout.(interface{ Sync() error }); ok {
			_ = f.Sync()
		}
		got := make(chan error, 1)
		// Ends when the parent writes or closes the pipe, or dies.
		go func() { _, err := bufio.NewReader(os.Stdin).ReadString('\n'); got <- err }()
		select {
		case err := <-got:
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// benchProcs runs the --procs table against the manager and baseline
// server cfg names; exe is this program.
func benchProcs(ctx context.Context, e *env, a *benchArgs, cfg baseline.Config, exe string, stdout io.Writer) error {
	doc := procsDoc{Procs: a.bl.procs, Placement: cfg.Placement.Mode, Conns: cfg.Conns, Verify: cfg.Verify}
	fmt.Fprintf(stdout, "placement: %s; the %d bench processes run where bench runs\n",
		cfg.Placement.Describe(cfg.ExternalManager, cfg.ExternalServer), a.bl.procs)
	fmt.Fprintf(stdout, "%d bench processes against manager %s, their timed phases started together; plain TCP: %d streams (%d connections) to %s from one process\n",
		a.bl.procs, cfg.ManagerAddr, a.bl.procs, a.bl.procs*cfg.Conns, cfg.ServerAddr)
	fmt.Fprintf(stdout, "ratio = ours / plain TCP, totals over the processes (streams); in flight and count per process\n")
	fmt.Fprintf(stdout, "%-7s %-4s %5s %8s %7s %12s %12s %16s %16s %7s\n", "size", "op", "procs", "inflight", "count",
		"ours ops/s", "ours MiB/s", "plain TCP ops/s", "plain TCP MiB/s", "ratio")
	var failures []error
	for _, sz := range cfg.Sizes {
		for _, op := range cfg.Ops {
			row, backend, err := procsRow(ctx, e, a, cfg, exe, op, sz)
			if err != nil {
				return fmt.Errorf("%s %s: %w", op, fmtSize(sz), err)
			}
			doc.Backend = backend
			doc.Rows = append(doc.Rows, row)
			fmt.Fprintf(stdout, "%-7s %-4s %5d %8d %7d %12.0f %12.1f %16.0f %16.1f %7.2f\n", row.Size, row.Op, a.bl.procs,
				row.Inflight, row.Count, row.OursOps, row.OursMiB, row.TCPOps, row.TCPMiB, row.Ratio)
			if row.Errors > 0 || row.Mismatches > 0 {
				failures = append(failures, fmt.Errorf("%s %s: %d operations failed, %d moved wrong bytes", op, row.Size, row.Errors, row.Mismatches))
			}
		}
	}
	fmt.Fprintf(stdout, "route backend: %s\n", doc.Backend)
	nerr := 0
	if cfg.Verify {
		var v uint64
		for _, r := range doc.Rows {
			v += r.Verified
			nerr += r.Mismatches
		}
		status := "ok"
		if nerr > 0 {
			status = "FAILED"
		}
		fmt.Fprintf(stdout, "verify: %s (%s checked, %d mismatches)\n", status, fmtBytes(v), nerr)
	}
	nerr = 0
	for _, r := range doc.Rows {
		nerr += r.Errors + r.Mismatches
	}
	fmt.Fprintf(stdout, "errors: %d\n", nerr)
	if a.jsonPath != "" {
		if err := writeJSON(e.stdout, a.jsonPath, doc); err != nil {
			return err
		}
	}
	return errors.Join(failures...)
}

// procsRow measures one size and op: N children, then N plain streams.
func procsRow(ctx context.Context, e *env, a *benchArgs, cfg baseline.Config, exe, op string, sz uint64) (procRow, string, error) {
	count := cfg.Count
	if count == 0 {
		count = baseline.AutoCount(sz)
	}
	inflight, flag := cfg.Concurrency, "--concurrency"
	if cfg.Inflight > 0 && sz <= baseline.SmallMax {
		inflight, flag = cfg.Inflight, "--inflight"
	}
	args := []string{"bench", "--peer", cfg.ManagerAddr, "--op", op, "--size", fmtSize(sz), "--count", strconv.Itoa(count),
		"--warmup", strconv.Itoa(cfg.Warmup), flag, strconv.Itoa(inflight), "--json", "-", "--start-on-stdin",
		"--backend", a.c.backend, "--conns", strconv.Itoa(cfg.Conns), "--log-level", "warn",
		"--max-message-size", strconv.Itoa(a.c.maxMsg), "--timeout", a.timeout.String()}
	if cfg.Verify {
		args = append(args, "--verify")
	}
	if flag == "--inflight" && cfg.SignalEvery > 1 {
		args = append(args, "--signal-every", strconv.Itoa(cfg.SignalEvery))
	}
	if a.c.secret != "" {
		args = append(args, "--secret-file", a.c.secret)
	}
	docs, err := runChildren(ctx, exe, args, a.bl.procs)
	if err != nil {
		return procRow{}, "", err
	}
	row := procRow{Size: fmtSize(sz), SizeBytes: sz, Op: op, Inflight: inflight, Count: count}
	var ops, bytes uint64
	var longest float64
	backend := ""
	for _, d := range docs {
		ops, bytes = ops+d.Ops, bytes+d.Bytes
		longest = max(longest, d.ElapsedSec)
		row.Verified += d.Verified
		row.Mismatches += d.Mismatches
		row.Errors += d.Errors
		backend = d.Backend
		if cfg.WantBackend != "" && d.Backend != cfg.WantBackend {
			return procRow{}, "", fmt.Errorf("%w: a route uses %q, asked for %q", baseline.ErrWrongBackend, d.Backend, cfg.WantBackend)
		}
	}
	// Started together: the totals over the longest of the timed phases.
	el := time.Duration(longest * float64(time.Second))
	row.OursOps, row.OursMiB = bench.PerSec(ops, el), bench.MiBPerSec(bytes, el)
	n := count * a.bl.procs
	d, err := baseline.Stream(ctx, cfg.ServerAddr, op, baseline.Load{Size: sz, Count: n, Warmup: cfg.Warmup * a.bl.procs,
		Conns: cfg.Conns * a.bl.procs, Slots: inflight * a.bl.procs})
	if err != nil {
		return procRow{}, "", err
	}
	row.TCPOps, row.TCPMiB = bench.PerSec(uint64(n), d), bench.MiBPerSec(uint64(n)*sz, d)
	if row.TCPOps > 0 {
		row.Ratio = row.OursOps / row.TCPOps
	}
	return row, backend, nil
}

// runChildren starts n bench processes with args, waits until every one
// is warmed up, lets them all go at once and returns their reports (a
// failure quotes the child's stderr). The children are killed if ctx ends
// or any fails, and always reaped.
func runChildren(ctx context.Context, exe string, args []string, n int) ([]benchDoc, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type child struct {
		p      *proc.Proc
		out    proc.Buffer
		errb   proc.Buffer
		goPipe *os.File
	}
	kids := make([]*child, 0, n)
	defer func() {
		for _, k := range kids {
			k.goPipe.Close()
			if k.p != nil {
				_ = k.p.Kill() // no-op for one that exited; reaps it
			}
		}
	}()
	for i := range n {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		k := &child{goPipe: w}
		kids = append(kids, k)
		k.p, err = proc.Start(ctx, proc.Spec{Name: fmt.Sprintf("bench process %d", i+1), Path: exe, Args: args,
			Stdout: &k.out, Stderr: &k.errb, Stdin: r})
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("%w\n%s", err, k.errb.String())
		}
	}
	for _, k := range kids {
		if _, err := io.WriteString(k.goPipe, "go\n"); err != nil {
			return nil, fmt.Errorf("%s: %w", k.p.Name, err)
		}
		k.goPipe.Close()
	}
	docs := make([]benchDoc, 0, n)
	for _, k := range kids {
		select {
		case <-k.p.Done():
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		if err := k.p.Wait(); err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", k.p.Name, err, k.errb.String())
		}
		_, js, _ := strings.Cut(k.out.String(), startLine+"\n")
		var d benchDoc
		if err := json.Unmarshal([]byte(js), &d); err != nil {
			return nil, fmt.Errorf("%s: its report: %w\n%s", k.p.Name, err, js)
		}
		docs = append(docs, d)
	}
	return docs, nil
}
