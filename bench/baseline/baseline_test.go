package baseline

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/bench"
)

func startServer(t *testing.T) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ln)
	t.Cleanup(s.Close)
	return s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestClients(t *testing.T) {
	s := startServer(t)
	ctx := testCtx(t)
	for _, op := range []string{"put", "get"} {
		for _, l := range []Load{{Size: 1, Count: 1, Conns: 1}, {Size: 4096, Count: 7, Conns: 3}, {Size: 1 << 20, Count: 5, Conns: 2}, {Size: 3 << 20, Count: 2, Conns: 4}} {
			l.Warmup = 1
			d, err := Stream(ctx, s.Addr(), op, l)
			if err != nil || d <= 0 {
				t.Fatalf("stream %s %+v: %v, %v", op, l, d, err)
			}
		}
	}
	lat, err := PingPong(ctx, s.Addr(), Load{Size: 8, Count: 50, Warmup: 5})
	if err != nil || len(lat) != 50 || lat[0] <= 0 || lat[0] > lat[49] {
		t.Fatalf("ping-pong: %v, %v", lat, err)
	}
	for _, tc := range []struct{ count, depth, conns int }{{1, 1, 1}, {100, 64, 2}, {1000, 7, 3}, {10, 2, 8}} {
		d, err := Pipeline(ctx, s.Addr(), Load{Size: 64, Count: tc.count, Depth: tc.depth, Warmup: 3, Conns: tc.conns})
		if err != nil || d <= 0 {
			t.Fatalf("pipeline %+v: %v, %v", tc, d, err)
		}
	}
}

// A server that goes away makes the clients fail rather than hang.
func TestClientsServerGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ln)
	addr := s.Addr()
	ctx := testCtx(t)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		time.Sleep(50 * time.Millisecond)
		s.Close()
	}()
	defer func() { <-closed }()
	if _, err := Stream(ctx, addr, "get", Load{Size: 1 << 20, Count: 1 << 20, Conns: 2}); err == nil {
		t.Fatal("stream from a closed server succeeded")
	}
	if _, err := PingPong(ctx, addr, Load{Size: 8, Count: 10}); err == nil {
		t.Fatal("ping-pong to a closed server succeeded")
	}
	if ctx.Err() != nil {
		t.Fatal("clients hung until the test's deadline")
	}
}

func TestServerRejectsGarbage(t *testing.T) {
	s := startServer(t)
	for _, hdr := range [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		header{mode: 9, size: 8, count: 1}.encode(),
		header{mode: modeRR, size: 0, count: 1}.encode(),
		header{mode: modeRR, size: MaxSize + 1, count: 1}.encode(),
		header{mode: modePut, size: 8, count: maxCount + 1}.encode(),
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
	if _, err := PingPong(testCtx(t), s.Addr(), Load{Size: 8, Count: 3}); err != nil {
		t.Fatal(err)
	}
}

func TestAutoCountAndShare(t *testing.T) {
	for size, want := range map[uint64]int{8: 50000, 4 << 10: 50000, 64 << 10: 32768, 1 << 20: 2048, 16 << 20: 128, 1 << 30: 100} {
		if got := AutoCount(size); got != want {
			t.Errorf("AutoCount(%d) = %d, want %d", size, got, want)
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

func TestPlacement(t *testing.T) {
	if _, err := PlanPlacement("near"); !errors.Is(err, ErrConfig) {
		t.Errorf("placement near: %v, want ErrConfig", err)
	}
	p, err := PlanPlacement("any")
	if err != nil || p.BenchCPU != -1 || p.ServerCPU != -1 || p.PinBench() != nil {
		t.Fatalf("placement any: %+v, %v", p, err)
	}
	if d := p.Describe(true, true); !strings.HasPrefix(d, "any (no pinning") || strings.Contains(d, "not pinned") {
		t.Errorf("any with external servers: %q", d)
	}
	p = Placement{Mode: "split", BenchCPU: 0, ServerCPU: 1}
	want := "split (bench on CPU 0; manager and baseline server on CPU 1); the --peer manager was not started by bench and is not pinned"
	if d := p.Describe(true, false); d != want {
		t.Errorf("Describe = %q, want %q", d, want)
	}
}

// fakeOurs answers every measurement at once: Ops operations in a second,
// with errs failures in the table's first measurement.
func fakeOurs(errs int) (Ours, *[]bench.Config) {
	var asked []bench.Config
	return func(ctx context.Context, c bench.Config) (*bench.Result, error) {
		asked = append(asked, c)
		r := &bench.Result{Elapsed: time.Second, Ops: uint64(c.Count), Bytes: uint64(c.Count) * c.Size, Backend: "tcp",
			Lat: []time.Duration{time.Microsecond, 2 * time.Microsecond}}
		if len(asked) == 1 && errs > 0 {
			r.Errs, r.FirstErr = errs, errors.New("boom")
		}
		return r, nil
	}, &asked
}

var (
	rowRE      = regexp.MustCompile(`(?m)^(\S+)\s+(put|get)\s+(\d+)\s+(\d+)\s+(\d+\.\d)\s+(\d+)\s+(\d+\.\d)\s+(\d+)\s+(\d+\.\d\d)$`)
	latencyRE  = regexp.MustCompile(`(?m)^latency: 8B get, one at a time, n=\d+: ours p50 \S+ p99 \S+; plain TCP ping-pong p50 \S+ p99 \S+; ratio p50 \d+\.\d\d; timed with (tsc|monotonic) \(adds \d+ns\)$`)
	pipelineRE = regexp.MustCompile(`(?m)^pipeline: 64B put, \d+ in flight, conns=\d+, n=\d+: ours \d+ ops/s; plain TCP pipeline \d+ ops/s; ratio \d+\.\d\d$`)
)

// Run asks ours for every measurement, prints one row per size × op and
// the ratio lines, and returns the failed operations as an error after a
// complete report.
func TestRun(t *testing.T) {
	s := startServer(t)
	ours, asked := fakeOurs(3)
	cfg := Config{
		Sizes: []uint64{4096, 1 << 20}, Ops: []string{"get", "put"}, Concurrency: 2, Warmup: 1, Conns: 2,
		LatCount: 20, PipeCount: 100, PipeDepth: 8, Backend: "auto", Placement: Placement{Mode: "any", BenchCPU: -1, ServerCPU: -1},
		ManagerAddr: "127.0.0.1:1", ServerAddr: s.Addr(), Count: 10, Inflight: 8,
	}
	var out bytes.Buffer
	rep, err := Run(testCtx(t), cfg, ours, &out)
	if rep == nil || err == nil || !strings.Contains(err.Error(), "get 4KiB: 3 operations failed; first: boom") {
		t.Fatalf("Run: %v, %v\n%s", rep, err, out.String())
	}
	text := out.String()
	if !strings.HasPrefix(text, "placement: any (") || !strings.Contains(text, "manager 127.0.0.1:1, baseline server "+s.Addr()+"; conns=2 concurrency=2 warmup=1") {
		t.Errorf("header:\n%s", text)
	}
	rows := rowRE.FindAllStringSubmatch(text, -1)
	if len(rows) != 4 || rows[0][1] != "4KiB" || rows[0][2] != "get" || rows[3][1] != "1MiB" || rows[3][2] != "put" {
		t.Errorf("table rows %q in:\n%s", rows, text)
	}
	if !latencyRE.MatchString(text) || !pipelineRE.MatchString(text) || !strings.HasSuffix(text, "\nerrors: 3\n") {
		t.Errorf("latency, pipeline or errors line missing:\n%s", text)
	}
	if len(*asked) != 6 || (*asked)[4].Size != LatSize || (*asked)[4].Concurrency != 1 || (*asked)[5].Concurrency != 8 {
		t.Errorf("measurements asked: %+v", *asked)
	}
	// Inflight: 4 KiB runs 8 in flight from one goroutine, 1 MiB --concurrency's 2.
	if a := *asked; len(a) == 6 && (a[0].Concurrency != 8 || !a[0].Ring || a[2].Concurrency != 2 || a[2].Ring) {
		t.Errorf("in flight asked: %+v", a)
	}
	if !strings.Contains(text, "\nin flight: 8 at sizes up to 4KiB (one goroutine posts and reaps them), 2 above\n") {
		t.Errorf("no in-flight line:\n%s", text)
	}
	if rep.Backend != "tcp" || rep.Errors() != 3 || rep.Throughput[0].Errors != 3 || rep.Latency == nil || rep.Pipeline == nil {
		t.Errorf("report %+v", rep)
	}
	for _, r := range rep.Throughput {
		if r.Ours <= 0 || r.TCP <= 0 || r.Ratio <= 0 || r.Count != 10 || r.OursOps <= 0 || r.TCPOps <= 0 ||
			r.Inflight != map[uint64]int{4096: 8, 1 << 20: 2}[r.SizeBytes] {
			t.Errorf("row %+v", r)
		}
	}
}

// A measurement of ours that stops early ends the run with an error and
// no report.
func TestRunStopsOnEarlyStop(t *testing.T) {
	s := startServer(t)
	ours := func(ctx context.Context, c bench.Config) (*bench.Result, error) {
		return &bench.Result{Ops: 5, Stop: rdmamgr.ErrPeerGone}, nil
	}
	cfg := Config{Sizes: []uint64{4096}, Ops: []string{"put"}, Concurrency: 1, Conns: 1, LatCount: 1, PipeCount: 1, PipeDepth: 1,
		Placement: Placement{Mode: "any", BenchCPU: -1, ServerCPU: -1}, ServerAddr: s.Addr()}
	rep, err := Run(testCtx(t), cfg, ours, io.Discard)
	if rep != nil || !errors.Is(err, rdmamgr.ErrPeerGone) || !strings.Contains(err.Error(), "put 4KiB: stopped after 5 operations") {
		t.Fatalf("Run: %v, %v", rep, err)
	}
}

// The server decodes every header a client sends: any 24 bytes either fail
// or give bounded fields that encode back to the same bytes.
func FuzzDecodeHeader(f *testing.F) {
	f.Add(header{mode: modePut, size: 4096, count: 10}.encode())
	f.Add(header{mode: modeRR, size: MaxSize, count: maxCount}.encode())
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < hdrLen {
			return
		}
		b = b[:hdrLen]
		h, err := decodeHeader(b)
		if err != nil {
			return
		}
		if h.mode < modePut || h.mode > modeRR || h.size == 0 || h.size > MaxSize || h.count > maxCount || h.slots > maxSlots || h.nslots()*h.size > MaxSize {
			t.Fatalf("decoded out-of-bounds header %+v from %x", h, b)
		}
		want := bytes.Clone(b)
		clear(want[7:8])
		if got := h.encode(); !bytes.Equal(got, want) {
			t.Fatalf("header %x decodes to %+v, which encodes to %x", b, h, got)
		}
	})
}
