package baseline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/bench"
)

func TestMemcpy(t *testing.T) {
	src := []byte("the same-host bound")
	dst := make([]byte, len(src))
	d, err := Memcpy(testCtx(t), dst, src, 10, 2)
	if err != nil || d <= 0 || !bytes.Equal(dst, src) {
		t.Fatalf("Memcpy: %v, %v, dst %q", d, err, dst)
	}
	if _, err := Memcpy(testCtx(t), dst[:3], src, 1, 0); err == nil {
		t.Error("Memcpy between buffers of different sizes succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Memcpy(ctx, dst, src, 1<<40, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Memcpy with an ended context: %v", err)
	}
}

var (
	memcpyRowRE     = regexp.MustCompile(`(?m)^(\S+)\s+(put|get)\s+(\d+)\s+(\d+)\s+(\d+\.\d)\s+(\d+)\s+(\d+\.\d)\s+(\d+)\s+(\d+\.\d\d)$`)
	memcpyLatencyRE = regexp.MustCompile(`(?m)^latency: 8B get, one at a time, n=20: ours p50 \S+ p99 \S+; placement split; timed with (tsc|monotonic) \(adds \d+ns\)$`)
)

// memcpyConfig is a run against memcpy with no baseline server at all.
func memcpyConfig() Config {
	return Config{
		Sizes: []uint64{8, 1 << 20}, Ops: []string{"put", "get"}, Concurrency: 1, Warmup: 1, Conns: 2,
		LatCount: 20, PipeCount: 100, PipeDepth: 8, Backend: "tcp", Against: AgainstMemcpy,
		Placement: Placement{Mode: "split", BenchCPU: 0, ServerCPU: 1}, ManagerAddr: "127.0.0.1:1", Count: 10,
	}
}

// Against memcpy every row's baseline is a memcpy of the row's size in the
// buffers Memory gave (and took back), the latency line has ours alone, and
// there is no pipeline (nor any baseline server to dial).
func TestRunAgainstMemcpy(t *testing.T) {
	ours, asked := fakeOurs(0)
	cfg := memcpyConfig()
	var sizes []uint64
	var held int
	cfg.Memory = func(_ context.Context, sz uint64) ([]byte, []byte, func(), error) {
		sizes, held = append(sizes, sz), held+1
		return make([]byte, sz), make([]byte, sz), func() { held-- }, nil
	}
	var out bytes.Buffer
	rep, err := Run(testCtx(t), cfg, ours, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	text := out.String()
	if !strings.HasPrefix(text, "placement: split (bench and its memcpy on CPU 0; the manager on CPU 1)\n") ||
		!strings.Contains(text, "\nmanager 127.0.0.1:1; conns=2 concurrency=1 warmup=1") || !strings.Contains(text, "ratio = ours / memcpy") ||
		!strings.Contains(text, "memcpy MiB/s") || strings.Contains(text, "plain TCP") || strings.Contains(text, "pipeline:") {
		t.Errorf("header or lines:\n%s", text)
	}
	if rows := memcpyRowRE.FindAllStringSubmatch(text, -1); len(rows) != 4 || rows[0][1] != "8B" || rows[3][1] != "1MiB" || rows[3][2] != "get" {
		t.Errorf("rows %q in:\n%s", rows, text)
	}
	if !memcpyLatencyRE.MatchString(text) || !strings.HasSuffix(text, "\nroute backend: tcp\nerrors: 0\n") {
		t.Errorf("latency, backend or errors line:\n%s", text)
	}
	if len(*asked) != 5 || (*asked)[0].Concurrency != 1 || (*asked)[4].Size != LatSize {
		t.Errorf("measurements asked: %+v", *asked)
	}
	if len(sizes) != 4 || sizes[0] != 8 || sizes[3] != 1<<20 || held != 0 {
		t.Errorf("memcpy buffers asked %v, %d not given back", sizes, held)
	}
	checkMemcpyReport(t, rep)
}

func checkMemcpyReport(t *testing.T, rep *Report) {
	t.Helper()
	if rep.Against != AgainstMemcpy || rep.Pipeline != nil || rep.Latency == nil || rep.Latency.OursP50 <= 0 || rep.Latency.TCPP50 != 0 {
		t.Fatalf("report %+v, latency %+v", rep, rep.Latency)
	}
	for _, r := range rep.Throughput {
		if r.Ours <= 0 || r.Memcpy <= 0 || r.TCP != 0 || r.Ratio != r.Ours/r.Memcpy {
			t.Errorf("row %+v", r)
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	js := string(b)
	for _, want := range []string{`"against":"memcpy"`, `"memcpy_mib_s":`, `"ratio":`, `"ours_p50_us":`, `"backend":"tcp"`} {
		if !strings.Contains(js, want) {
			t.Errorf("JSON lacks %s: %s", want, js)
		}
	}
	for _, not := range []string{`"tcp_mib_s"`, `"tcp_p50_us"`, `"pipeline"`} {
		if strings.Contains(js, not) {
			t.Errorf("JSON against memcpy has %s: %s", not, js)
		}
	}
}

func TestDescribeSameHost(t *testing.T) {
	for _, tc := range []struct {
		p    Placement
		ext  bool
		want string
	}{
		{Placement{Mode: "any", BenchCPU: -1, ServerCPU: -1}, true, "any (no pinning; the scheduler places bench, its memcpy and the manager)"},
		{Placement{Mode: "same", BenchCPU: 3, ServerCPU: 3}, false, "same (bench, its memcpy and the manager all on CPU 3)"},
		{Placement{Mode: "split", BenchCPU: 0, ServerCPU: 1}, true, "split (bench and its memcpy on CPU 0; the manager on CPU 1); the --peer manager was not started by bench and is not pinned"},
	} {
		if got := describeSameHost(tc.p, tc.ext); got != tc.want {
			t.Errorf("describeSameHost(%+v, %v) = %q, want %q", tc.p, tc.ext, got, tc.want)
		}
	}
}

// Buffers Memory cannot give end the run with its error.
func TestRunAgainstMemcpyNoMemory(t *testing.T) {
	ours, _ := fakeOurs(0)
	cfg := memcpyConfig()
	boom := errors.New("no memory")
	cfg.Memory = func(context.Context, uint64) ([]byte, []byte, func(), error) { return nil, nil, nil, boom }
	if rep, err := Run(testCtx(t), cfg, ours, io.Discard); rep != nil || !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "put 8B: memcpy buffers:") {
		t.Fatalf("Run: %v, %v", rep, err)
	}
	cfg.Memory = func(context.Context, uint64) ([]byte, []byte, func(), error) {
		return make([]byte, 4), make([]byte, 8), func() {}, nil
	}
	if _, err := Run(testCtx(t), cfg, ours, io.Discard); err == nil || !strings.Contains(err.Error(), "memcpy buffers of 4 and 8 bytes, want 8") {
		t.Fatalf("Run with short buffers: %v", err)
	}
}

// A measurement whose route is not of the backend asked for ends the run:
// a same-host bench that fell back to TCP must not print TCP's figures as
// shm's.
func TestRunWrongBackend(t *testing.T) {
	ours, asked := fakeOurs(0) // its routes are "tcp"
	cfg := memcpyConfig()
	cfg.WantBackend = "shm"
	var out bytes.Buffer
	rep, err := Run(testCtx(t), cfg, ours, &out)
	if rep != nil || !errors.Is(err, ErrWrongBackend) || !strings.Contains(err.Error(), `put 8B: baseline: the route is not of the backend asked for: the route uses "tcp", asked for "shm"`) {
		t.Fatalf("Run: %v, %v", rep, err)
	}
	if len(*asked) != 1 || memcpyRowRE.MatchString(out.String()) {
		t.Errorf("ran on after the wrong backend: %d measurements\n%s", len(*asked), out.String())
	}
	cfg.WantBackend = "tcp"
	if _, err := Run(testCtx(t), cfg, ours, io.Discard); err != nil {
		t.Fatalf("Run with the backend asked for: %v", err)
	}
}

// A failed 8-byte Get against memcpy is counted and returned after the
// complete report, as against TCP.
func TestRunAgainstMemcpyLatencyErrors(t *testing.T) {
	cfg := memcpyConfig()
	cfg.Sizes = []uint64{4096}
	cfg.Ops = []string{"get"}
	ours := func(ctx context.Context, c bench.Config) (*bench.Result, error) {
		r := &bench.Result{Elapsed: time.Second, Ops: uint64(c.Count), Bytes: uint64(c.Count) * c.Size, Backend: "tcp", Lat: []time.Duration{time.Microsecond}}
		if c.Size == LatSize {
			r.Errs, r.FirstErr = 2, errors.New("lost")
		}
		return r, nil
	}
	var out bytes.Buffer
	rep, err := Run(testCtx(t), cfg, ours, &out)
	if rep == nil || err == nil || !strings.Contains(err.Error(), "latency get 8B: 2 operations failed; first: lost") ||
		rep.Latency.Errors != 2 || !strings.HasSuffix(out.String(), "\nerrors: 2\n") {
		t.Fatalf("Run: %+v, %v\n%s", rep, err, out.String())
	}
}
