package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
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

func benchJSON(cfg benchConfig, conns int, r *benchResult) benchDoc {
	d := benchDoc{
		Op: cfg.op, Size: fmtSize(cfg.size), SizeBytes: cfg.size, Count: cfg.count, Concurrency: cfg.concurrency,
		Conns: conns, Backend: r.backend, Verify: cfg.verify, Ops: r.ops, Bytes: r.bytes,
		ElapsedSec: r.elapsed.Seconds(), MiBPerSec: mibPerSec(r.bytes, r.elapsed), OpsPerSec: perSec(r.ops, r.elapsed),
		LatencyUS: latencyDoc{P50: micros(pct(r.lat, 50)), P99: micros(pct(r.lat, 99)), P999: micros(pct(r.lat, 99.9)), Max: micros(pct(r.lat, 100))},
		Errors:    r.errs, Mismatches: r.mismatch, Verified: r.verified, Complete: r.stop == nil,
	}
	if r.firstErr != nil {
		d.FirstError = r.firstErr.Error()
	}
	if r.stop != nil {
		d.Stopped = r.stop.Error()
	}
	return d
}

// reportBench prints the figures (text on stdout unless --json -) and
// writes --json.
func reportBench(e *env, a *benchArgs, cfg benchConfig, r *benchResult) error {
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

func printBench(w io.Writer, cfg benchConfig, conns int, r *benchResult) {
	fmt.Fprintf(w, "op=%s size=%s count=%d concurrency=%d conns=%d backend=%s verify=%v\n",
		cfg.op, fmtSize(cfg.size), cfg.count, cfg.concurrency, conns, r.backend, cfg.verify)
	if r.stop != nil {
		fmt.Fprintf(w, "stopped early (%v): figures of the %d operations that succeeded\n", r.stop, r.ops)
	}
	fmt.Fprintf(w, "throughput: %.1f MiB/s  %.0f ops/s  (%s in %d ops in %v)\n",
		mibPerSec(r.bytes, r.elapsed), perSec(r.ops, r.elapsed), fmtBytes(r.bytes), r.ops, r.elapsed.Round(time.Microsecond))
	fmt.Fprintf(w, "latency: p50=%v p99=%v p99.9=%v max=%v\n",
		pct(r.lat, 50).Round(time.Microsecond), pct(r.lat, 99).Round(time.Microsecond),
		pct(r.lat, 99.9).Round(time.Microsecond), pct(r.lat, 100).Round(time.Microsecond))
	if cfg.verify {
		status := "ok"
		if r.mismatch > 0 || r.errs > 0 {
			status = "FAILED"
		}
		fmt.Fprintf(w, "verify: %s (%s checked, %d mismatches)\n", status, fmtBytes(r.verified), r.mismatch)
	}
	fmt.Fprintf(w, "errors: %d\n", r.errs)
}

// progressLine returns a progress callback that rewrites one terminal line;
// the report that follows starts by clearing it.
func progressLine(w io.Writer) func(ops, bytes uint64, el time.Duration) {
	return func(ops, bytes uint64, el time.Duration) {
		fmt.Fprintf(w, "\r\033[K%d ops  %s  %.1f MiB/s  %v", ops, fmtBytes(bytes), mibPerSec(bytes, el), el.Round(time.Second))
	}
}

// pct is the p-th percentile of sorted (nearest rank below).
func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(sorted)-1))
	return sorted[i]
}

func perSec(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
