package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/bench/baseline"
	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// Tiny counts: these check the machinery, not the figures.
var tinyBaseline = []string{"--count", "20", "--warmup", "2", "--lat-count", "20", "--pipeline-count", "200", "--pipeline-depth", "8"}

var (
	rowRE      = regexp.MustCompile(`(?m)^(\S+)\s+(put|get)\s+(\d+)\s+(\d+)\s+(\d+\.\d)\s+(\d+)\s+(\d+\.\d)\s+(\d+)\s+(\d+\.\d\d)$`)
	latencyRE  = regexp.MustCompile(`(?m)^latency: 8B get, one at a time, n=\d+: ours p50 \S+ p99 \S+; plain TCP ping-pong p50 \S+ p99 \S+; ratio p50 \d+\.\d\d; timed with (tsc|monotonic) \(adds \d+ns\)$`)
	pipelineRE = regexp.MustCompile(`(?m)^pipeline: 64B put, \d+ in flight, conns=\d+, n=\d+: ours \d+ ops/s; plain TCP pipeline \d+ ops/s; ratio \d+\.\d\d$`)
)

// checkBaselineOutput checks the table has one row per size × op and the
// latency and pipeline ratio lines, and that the JSON file agrees.
func checkBaselineOutput(t *testing.T, out string, sizes, ops []string, jsonPath string) {
	t.Helper()
	rows := rowRE.FindAllStringSubmatch(out, -1)
	if len(rows) != len(sizes)*len(ops) {
		t.Fatalf("want %d table rows, found %d in:\n%s", len(sizes)*len(ops), len(rows), out)
	}
	i := 0
	for _, s := range sizes {
		for _, op := range ops {
			if rows[i][1] != s || rows[i][2] != op {
				t.Errorf("row %d is %s %s, want %s %s", i, rows[i][1], rows[i][2], s, op)
			}
			i++
		}
	}
	for _, re := range []*regexp.Regexp{latencyRE, pipelineRE} {
		if !re.MatchString(out) {
			t.Errorf("output has no line matching %s:\n%s", re, out)
		}
	}
	if !strings.Contains(out, "\nerrors: 0\n") {
		t.Errorf("output does not end with errors: 0:\n%s", out)
	}
	if jsonPath == "" {
		return
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep baseline.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json file: %v\n%s", err, b)
	}
	if len(rep.Throughput) != len(sizes)*len(ops) || rep.Latency == nil || rep.Pipeline == nil {
		t.Fatalf("--json file lacks figures:\n%s", b)
	}
	for _, r := range rep.Throughput {
		if r.Ours <= 0 || r.TCP <= 0 || r.Ratio <= 0 {
			t.Errorf("--json row %+v has a zero figure", r)
		}
	}
	if rep.Latency.OursP50 <= 0 || rep.Latency.TCPP50 <= 0 || rep.Pipeline.OursOps <= 0 || rep.Pipeline.TCPOps <= 0 {
		t.Errorf("--json latency %+v / pipeline %+v has a zero figure", *rep.Latency, *rep.Pipeline)
	}
}

// TestBenchBaseline builds rdmamgr and runs `bench --baseline` as a
// process, which starts its own manager and baseline server as children,
// once per placement; then it runs the --baseline orchestration in the test
// process (so -race sees it) against a manager child given by --peer and an
// in-process baseline server given by --baseline-peer. (One actor system per
// process: protoactor's remote start-up sets gRPC's global logger, which
// races with another remote's server in the same process.)
func TestBenchBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := testBinary(t)
	placements := []string{"any"}
	if cpus, err := proc.AllowedCPUs(); err == nil && len(cpus) >= 1 {
		placements = append(placements, "same")
		if len(cpus) >= 2 {
			placements = append(placements, "split")
		}
	}
	for _, pl := range placements {
		t.Run("binary/"+pl, func(t *testing.T) { benchBaselineBinary(t, bin, pl) })
	}
	t.Run("in-process", func(t *testing.T) { benchBaselineInProcess(t, bin) })
}

// benchBaselineBinary runs the binary's bench --baseline at placement pl.
func benchBaselineBinary(t *testing.T, bin, pl string) {
	jsonPath := filepath.Join(t.TempDir(), pl+".json")
	args := append([]string{"bench", "--baseline", "--sizes", "4KiB,64KiB", "--placement", pl, "--json", jsonPath}, tinyBaseline...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr proc.Buffer
	if err := proc.Run(ctx, proc.Spec{Path: bin, Args: args, Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("rdmamgr %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.HasPrefix(out, "placement: "+pl+" ") {
		t.Errorf("first line does not give the placement:\n%s", out)
	}
	checkBaselineOutput(t, out, []string{"4KiB", "64KiB"}, []string{"put", "get"}, jsonPath)
	var rep baseline.Report
	b, _ := os.ReadFile(jsonPath)
	_ = json.Unmarshal(b, &rep)
	if rep.Placement != pl || (pl != "any") != (rep.BenchCPU >= 0) {
		t.Errorf("--json placement %q bench CPU %d, want %q", rep.Placement, rep.BenchCPU, pl)
	}
	if pl == "split" && rep.BenchCPU == rep.ServerCPU {
		t.Errorf("split placement put bench and servers on CPU %d", rep.BenchCPU)
	}
}

// benchBaselineInProcess runs the --baseline orchestration in the test
// process against a manager child (--peer) and an in-process baseline
// server (--baseline-peer).
func benchBaselineInProcess(t *testing.T, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mgr, err := proc.Start(ctx, proc.Spec{Name: "manager", Path: bin, Args: []string{"serve", "--listen", "127.0.0.1:0", "--log-level", "warn"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := mgr.Stop(baseline.StopGrace); err != nil {
			t.Errorf("stop manager: %v", err)
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bs := baseline.NewServer(ln)
	defer bs.Close()
	jsonPath := filepath.Join(t.TempDir(), "b.json")
	args := append([]string{"bench", "--baseline", "--peer", mgr.Addr, "--baseline-peer", bs.Addr(),
		"--sizes", "4KiB,1MiB", "--ops", "get,put", "--conns", "3", "--concurrency", "2", "--verify", "--json", jsonPath}, tinyBaseline...)
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	checkBaselineOutput(t, out, []string{"4KiB", "1MiB"}, []string{"get", "put"}, jsonPath)
	if !strings.Contains(out, "conns=3 concurrency=2") {
		t.Errorf("output does not give conns and concurrency:\n%s", out)
	}
}

func TestBenchBaselineUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--sizes", "4KiB"}, // needs --baseline
		{"bench", "--baseline", "--sizes", "4KiB,zap"},
		{"bench", "--baseline", "--ops", "put,cas"},
		{"bench", "--baseline", "--placement", "near"},
		{"bench", "--baseline", "--size", "1MiB"},
		{"bench", "--baseline", "--pipeline-depth", "0"},
		{"bench", "--baseline", "--baseline-peer", "nohost"},
		{"bench", "--op", "put"},     // --peer still required without --baseline
		{"bench", "baseline-server"}, // it is a command of its own
		{"baseline-server", "extra"},
		{"baseline-server", "--listen", "nohost"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2\nstderr: %s", args, code, stderr.String())
		}
	}
}

// baseline-server is a command: it prints its ready line, serves the
// baseline protocol and exits 0 when interrupted.
func TestBaselineServerCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := proc.Start(ctx, proc.Spec{Name: "baseline-server", Path: testBinary(t), Args: []string{"baseline-server", "--listen", "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	lat, err := baseline.PingPong(ctx, s.Addr, baseline.Load{Size: 8, Count: 10})
	if err != nil || len(lat) != 10 {
		t.Fatalf("ping-pong with baseline-server: %v, %v", lat, err)
	}
	if err := s.Stop(time.Minute); err != nil {
		t.Fatalf("baseline-server on SIGTERM: %v", err)
	}
}
