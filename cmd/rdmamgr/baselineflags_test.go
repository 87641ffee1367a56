package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/bench/baseline"
	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// parseBaseline parses bench's flags as the command does and returns the
// --baseline configuration they make.
func parseBaseline(t *testing.T, args ...string) (baseline.Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a := &benchArgs{}
	a.register(fs)
	if err := fs.Parse(append([]string{"--baseline"}, args...)); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return a.baselineConfig(set)
}

// What --against and --backend choose: the baseline, the default sizes and
// concurrency, and the route kind every measurement must have.
func TestBaselineAgainstConfig(t *testing.T) {
	sameHost := []uint64{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20}
	tcpSizes := []uint64{4 << 10, 64 << 10, 1 << 20, 16 << 20}
	for _, tc := range []struct {
		args                   []string
		against, backend, want string
		sizes                  []uint64
		conc                   int
	}{
		{nil, "tcp", "tcp", "tcp", tcpSizes, baselineDefaultConc},
		{[]string{"--backend", "shm"}, "memcpy", "shm", "shm", sameHost, 1},
		{[]string{"--backend", "shm", "--against", "tcp"}, "tcp", "shm", "shm", tcpSizes, baselineDefaultConc},
		{[]string{"--against", "memcpy"}, "memcpy", "auto", "", sameHost, 1},
		{[]string{"--against", "memcpy", "--backend", "tcp", "--sizes", "1MiB", "--concurrency", "3"}, "memcpy", "tcp", "tcp", []uint64{1 << 20}, 3},
		{[]string{"--backend", "ibverbs"}, "tcp", "ibverbs", "ibverbs", tcpSizes, baselineDefaultConc},
	} {
		cfg, err := parseBaseline(t, tc.args...)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if cfg.Against != tc.against || cfg.Backend != tc.backend || cfg.WantBackend != tc.want ||
			!slices.Equal(cfg.Sizes, tc.sizes) || cfg.Concurrency != tc.conc || cfg.Count != 0 {
			t.Errorf("%q: against %q backend %q want %q sizes %v concurrency %d count %d", tc.args,
				cfg.Against, cfg.Backend, cfg.WantBackend, cfg.Sizes, cfg.Concurrency, cfg.Count)
		}
	}
	for _, args := range [][]string{
		{"--against", "cp"},
		{"--against", "memcpy", "--baseline-peer", "127.0.0.1:1"},
		{"--backend", "shm", "--pipeline-depth", "8"},
		{"--against", "memcpy", "--pipeline-count", "8"},
	} {
		if _, err := parseBaseline(t, args...); err == nil {
			t.Errorf("%q: accepted", args)
		} else if _, ok := err.(usageError); !ok {
			t.Errorf("%q: %v is not a usage error", args, err)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"bench", "--against", "memcpy"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--against needs --baseline") {
		t.Errorf("--against without --baseline: exit %d, %s", code, stderr.String())
	}
}

var (
	memcpyHeaderRE  = regexp.MustCompile(`(?m)^size\s+op\s+inflight\s+count\s+ours MiB/s\s+ours ops/s\s+memcpy MiB/s\s+memcpy ops/s\s+ratio$`)
	memcpyLatencyRE = regexp.MustCompile(`(?m)^latency: 8B get, one at a time, n=20: ours p50 \S+ p99 \S+; placement split; timed with (tsc|monotonic) \(adds \d+ns\)$`)
)

// bench --baseline --against memcpy, as a process: no baseline server, a
// row per size × op against memcpy, ours' 8-byte Get with the placement,
// the route's backend (the one asked for), and the JSON of the same.
func TestBenchBaselineAgainstMemcpy(t *testing.T) {
	cpus, err := proc.AllowedCPUs()
	if err != nil || len(cpus) < 2 {
		t.Skip("placement split needs two CPUs")
	}
	bin := testBinary(t)
	jsonPath := filepath.Join(t.TempDir(), "same.json")
	args := append([]string{"bench", "--baseline", "--against", "memcpy", "--backend", "tcp", "--sizes", "8B,64KiB",
		"--placement", "split", "--verify", "--json", jsonPath}, "--count", "20", "--warmup", "2", "--lat-count", "20")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr proc.Buffer
	if err := proc.Run(ctx, proc.Spec{Path: bin, Args: args, Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("rdmamgr %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.HasPrefix(out, "placement: split (bench and its memcpy on CPU ") || !memcpyHeaderRE.MatchString(out) ||
		strings.Contains(out, "baseline server") || strings.Contains(out, "pipeline:") {
		t.Errorf("header:\n%s", out)
	}
	rows := rowRE.FindAllStringSubmatch(out, -1)
	if len(rows) != 4 || rows[0][1] != "8B" || rows[0][2] != "put" || rows[3][1] != "64KiB" || rows[3][2] != "get" {
		t.Errorf("rows %q in:\n%s", rows, out)
	}
	if !memcpyLatencyRE.MatchString(out) || !strings.HasSuffix(out, "\nroute backend: tcp\nerrors: 0\n") {
		t.Errorf("latency, backend or errors line:\n%s", out)
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep baseline.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Against != "memcpy" || rep.Backend != "tcp" || rep.Placement != "split" || rep.Concurrency != 1 || rep.Pipeline != nil ||
		rep.Latency == nil || rep.Latency.OursP50 <= 0 || len(rep.Throughput) != 4 {
		t.Fatalf("--json:\n%s", b)
	}
	for _, r := range rep.Throughput {
		if r.Ours <= 0 || r.Memcpy <= 0 || r.Ratio <= 0 || r.Count != 20 {
			t.Errorf("--json row %+v", r)
		}
	}
}
