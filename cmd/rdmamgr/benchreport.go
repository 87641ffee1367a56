package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rdmamgr/rdmamgr/bench"
)

// benchDoc is what bench --json writes for a plain run.
type benchDoc struct {
	Op          string     `json:"op"`
	Size        string     `json:"size"`
	SizeBytes   uint64     `json:"size_bytes"`
	Count       int        `json:"count"` // asked for
	Concurrency int        `json:"concurrency"`
	Conns       int        `json:"conns"`
	Backend     string     `json:"backend"`
	Verify      bool       `json:"verify"`
	Ops         uint64     `json:"ops"`   // succeeded
	Bytes       uint64     `json:"bytes"` // moved by them
	ElapsedSec  float64    `json:"elapsed_s"`
	MiBPerSec   float64    `json:"mib_per_s"`
	OpsPerSec   float64    `json:"ops_per_s"`
	LatencyUS   latencyDoc `json:"latency_us"`
	Errors      int        `json:"errors"`
	FirstError  string     `json:"first_error,omitempty"`
	Mismatches  int        `json:"mismatches"`
	Verified    uint64     `json:"verified_bytes"`
	Complete    bool       `json:"complete"`
	Stopped     string     `json:"stopped,omitempty"` // why the run ended early
}

type latencyDoc struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
}

func benchJSON(cfg bench.Config, conns int, r *bench.Result) benchDoc {
	d := benchDoc{
		Op: cfg.Op, Size: fmtSize(cfg.Size), SizeBytes: cfg.Size, Count: cfg.Count, Concurrency: cfg.Concurrency,
		Conns: conns, Backend: r.Backend, Verify: cfg.Verify, Ops: r.Ops, Bytes: r.Bytes,
		ElapsedSec: r.Elapsed.Seconds(), MiBPerSec: bench.MiBPerSec(r.Bytes, r.Elapsed), OpsPerSec: bench.PerSec(r.Ops, r.Elapsed),
		LatencyUS: latencyDoc{P50: micros(pct(r.Lat, 50)), P99: micros(pct(r.Lat, 99)), P999: micros(pct(r.Lat, 99.9)), Max: micros(pct(r.Lat, 100))},
		Errors:    r.Errs, Mismatches: r.Mismatch, Verified: r.Verified, Complete: r.Stop == nil,
	}
	if r.FirstErr != nil {
		d.FirstError = r.FirstErr.Error()
	}
	if r.Stop != nil {
		d.Stopped = r.Stop.Error()
	}
	return d
}

// reportBench prints the figures (text on stdout unless --json -) and
// writes --json.
func reportBench(e *env, a *benchArgs, cfg bench.Config, r *bench.Result) error {
	if a.jsonPath != "-" {
		printBench(e.stdout, cfg, a.c.conns, r)
	}
	if a.jsonPath == "" {
		return nil
	}
	return writeJSON(e.stdout, a.jsonPath, benchJSON(cfg, a.c.conns, r))
}

// writeJSON writes v to path, or to stdout for "-".
func writeJSON(stdout io.Writer, path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = stdout.Write(b)
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}

func printBench(w io.Writer, cfg bench.Config, conns int, r *bench.Result) {
	fmt.Fprintf(w, "op=%s size=%s count=%d concurrency=%d conns=%d backend=%s verify=%v\n",
		cfg.Op, fmtSize(cfg.Size), cfg.Count, cfg.Concurrency, conns, r.Backend, cfg.Verify)
	if r.Stop != nil {
		fmt.Fprintf(w, "stopped early (%v): figures of the %d operations that succeeded\n", r.Stop, r.Ops)
	}
	fmt.Fprintf(w, "throughput: %.1f MiB/s  %.0f ops/s  (%s in %d ops in %v)\n",
		bench.MiBPerSec(r.Bytes, r.Elapsed), bench.PerSec(r.Ops, r.Elapsed), fmtBytes(r.Bytes), r.Ops, r.Elapsed.Round(time.Microsecond))
	fmt.Fprintf(w, "latency: p50=%v p99=%v p99.9=%v max=%v\n",
		pct(r.Lat, 50).Round(time.Microsecond), pct(r.Lat, 99).Round(time.Microsecond),
		pct(r.Lat, 99.9).Round(time.Microsecond), pct(r.Lat, 100).Round(time.Microsecond))
	if cfg.Verify {
		status := "ok"
		if r.Mismatch > 0 || r.Errs > 0 {
			status = "FAILED"
		}
		fmt.Fprintf(w, "verify: %s (%s checked, %d mismatches)\n", status, fmtBytes(r.Verified), r.Mismatch)
	}
	fmt.Fprintf(w, "errors: %d\n", r.Errs)
}

// progressLine returns a progress callback that rewrites one terminal line;
// the report that follows starts by clearing it.
func progressLine(w io.Writer) func(ops, bytes uint64, el time.Duration) {
	return func(ops, bytes uint64, el time.Duration) {
		fmt.Fprintf(w, "\r\033[K%d ops  %s  %.1f MiB/s  %v", ops, fmtBytes(bytes), bench.MiBPerSec(bytes, el), el.Round(time.Second))
	}
}

// pct and micros are bench's: the p-th percentile of sorted durations,
// and a duration in microseconds.
var (
	pct    = bench.Percentile
	micros = bench.Micros
)
