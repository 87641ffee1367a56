package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Tiny counts: these check the machinery, not the figures.
var tinyBaseline = []string{"--count", "20", "--warmup", "2", "--lat-count", "20", "--pipeline-count", "200", "--pipeline-depth", "8"}

var (
	rowRE      = regexp.MustCompile(`(?m)^(\S+)\s+(put|get)\s+(\d+)\s+(\d+\.\d)\s+(\d+\.\d)\s+(\d+\.\d\d)$`)
	latencyRE  = regexp.MustCompile(`(?m)^latency: 8B get, one at a time, n=\d+: ours p50 \S+ p99 \S+; plain TCP ping-pong p50 \S+ p99 \S+; ratio p50 \d+\.\d\d$`)
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
	var rep benchReport
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
	dir := t.TempDir()
	bin := filepath.Join(dir, "rdmamgr")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	placements := []string{"any"}
	if cpus, err := allowedCPUs(); err == nil && len(cpus) >= 1 {
		placements = append(placements, "same")
		if len(cpus) >= 2 {
			placements = append(placements, "split")
		}
	}
	for _, pl := range placements {
		t.Run("binary/"+pl, func(t *testing.T) {
			jsonPath := filepath.Join(dir, pl+".json")
			args := append([]string{"bench", "--baseline", "--sizes", "4KiB,64KiB", "--placement", pl, "--json", jsonPath}, tinyBaseline...)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("rdmamgr %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
			}
			out := stdout.String()
			if !strings.HasPrefix(out, "placement: "+pl+" ") {
				t.Errorf("first line does not give the placement:\n%s", out)
			}
			checkBaselineOutput(t, out, []string{"4KiB", "64KiB"}, []string{"put", "get"}, jsonPath)
			var rep benchReport
			b, _ := os.ReadFile(jsonPath)
			_ = json.Unmarshal(b, &rep)
			if rep.Placement != pl || (pl != "any") != (rep.BenchCPU >= 0) {
				t.Errorf("--json placement %q bench CPU %d, want %q", rep.Placement, rep.BenchCPU, pl)
			}
			if pl == "split" && rep.BenchCPU == rep.ServerCPU {
				t.Errorf("split placement put bench and servers on CPU %d", rep.BenchCPU)
			}
		})
	}
	t.Run("in-process", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var childErr bytes.Buffer
		mgr, err := startChild(ctx, "manager", bin, []string{"serve", "--listen", "127.0.0.1:0", "--log-level", "warn"}, -1, &lockedWriter{w: &childErr})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := mgr.stop(); err != nil {
				t.Errorf("stop manager: %v", err)
			}
		}()
		bs := startTestBaselineServer(t)
		jsonPath := filepath.Join(t.TempDir(), "b.json")
		args := append([]string{"bench", "--baseline", "--peer", mgr.addr, "--baseline-peer", bs.Addr(),
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
	})
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
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
		{"bench", "--op", "put"}, // --peer still required without --baseline
		{"bench", "baseline-server", "extra"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2\nstderr: %s", args, code, stderr.String())
		}
	}
}

func startTestBaselineServer(t *testing.T) *baselineServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newBaselineServer(ln)
	t.Cleanup(s.Close)
	return s
}

func TestBaselineClients(t *testing.T) {
	s := startTestBaselineServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, op := range []string{"put", "get"} {
		for _, tc := range []struct {
			size         uint64
			count, conns int
		}{{1, 1, 1}, {4096, 7, 3}, {1 << 20, 5, 2}, {3 << 20, 2, 4}} {
			d, err := blStream(ctx, s.Addr(), op, tc.size, tc.count, 1, tc.conns)
			if err != nil || d <= 0 {
				t.Fatalf("stream %s %+v: %v, %v", op, tc, d, err)
			}
		}
	}
	lat, err := blPingPong(ctx, s.Addr(), 8, 50, 5)
	if err != nil || len(lat) != 50 || lat[0] <= 0 || lat[0] > lat[49] {
		t.Fatalf("ping-pong: %v, %v", lat, err)
	}
	for _, tc := range []struct{ count, depth, conns int }{{1, 1, 1}, {100, 64, 2}, {1000, 7, 3}, {10, 2, 8}} {
		d, err := blPipeline(ctx, s.Addr(), 64, tc.count, tc.depth, 3, tc.conns)
		if err != nil || d <= 0 {
			t.Fatalf("pipeline %+v: %v, %v", tc, d, err)
		}
	}
}

// A server that goes away makes the clients fail rather than hang.
func TestBaselineClientsServerGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newBaselineServer(ln)
	addr := s.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		time.Sleep(50 * time.Millisecond)
		s.Close()
	}()
	_, err = blStream(ctx, addr, "get", 1<<20, 1<<20, 0, 2)
	if err == nil {
		t.Fatal("stream from a closed server succeeded")
	}
	if _, err := blPingPong(ctx, addr, 8, 10, 0); err == nil {
		t.Fatal("ping-pong to a closed server succeeded")
	}
	if ctx.Err() != nil {
		t.Fatal("clients hung until the test's deadline")
	}
}

func TestBaselineServerRejectsGarbage(t *testing.T) {
	s := startTestBaselineServer(t)
	for _, hdr := range [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		blHeader{mode: 9, size: 8, count: 1}.encode(),
		blHeader{mode: blModeRR, size: 0, count: 1}.encode(),
		blHeader{mode: blModeRR, size: blMaxSize + 1, count: 1}.encode(),
	} {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(hdr)
		_, err = io.ReadAll(c)
		c.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("server kept the connection open after %q", hdr)
		}
	}
	// And it still serves.
	if _, err := blPingPong(context.Background(), s.Addr(), 8, 3, 0); err != nil {
		t.Fatal(err)
	}
}

func TestReadyWatcher(t *testing.T) {
	ch := make(chan string, 1)
	w := &readyWatcher{ready: ch}
	for _, p := range []string{"noise\nrea", "dy 127.0.0.1:", "4242\nready 1.2.3.4:5\n"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	if got := <-ch; got != "127.0.0.1:4242" {
		t.Fatalf("ready address %q", got)
	}
	select {
	case got := <-ch:
		t.Fatalf("second ready line passed on: %q", got)
	default:
	}
}

func TestAutoCountAndShare(t *testing.T) {
	for size, want := range map[uint64]int{8: 50000, 4 << 10: 50000, 64 << 10: 32768, 1 << 20: 2048, 16 << 20: 128, 1 << 30: 100} {
		if got := autoCount(size); got != want {
			t.Errorf("autoCount(%d) = %d, want %d", size, got, want)
		}
	}
	for _, tc := range []struct{ total, n int }{{10, 3}, {2, 5}, {0, 2}, {7, 7}} {
		sum := 0
		for i := range tc.n {
			s := share(tc.total, tc.n, i)
			if s < tc.total/tc.n || s > tc.total/tc.n+1 {
				t.Errorf("share(%d, %d, %d) = %d", tc.total, tc.n, i, s)
			}
			sum += s
		}
		if sum != tc.total {
			t.Errorf("shares of %d over %d sum to %d", tc.total, tc.n, sum)
		}
	}
}
