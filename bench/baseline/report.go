package baseline

import (
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr/bench"
)

// Report is what a Run measured (bench --json writes it).
type Report struct {
	Against     string        `json:"against"` // AgainstTCP or AgainstMemcpy
	Placement   string        `json:"placement"`
	BenchCPU    int           `json:"bench_cpu"`  // -1: not pinned
	ServerCPU   int           `json:"server_cpu"` // -1: not pinned
	GOMAXPROCS  int           `json:"gomaxprocs"`
	Backend     string        `json:"backend"` // the route's kind, as the measurements reported it
	Conns       int           `json:"conns"`
	Concurrency int           `json:"concurrency"`
	Inflight    int           `json:"inflight,omitempty"`     // at sizes up to SmallMax (0: Concurrency)
	SignalEvery int           `json:"signal_every,omitempty"` // ours there: selective signaling (Config.SignalEvery)
	Warmup      int           `json:"warmup"`
	Verify      bool          `json:"verify"`
	Throughput  []Row         `json:"throughput"`
	Latency     *LatencyRow   `json:"latency,omitempty"`
	Pipeline    *PipelineRow  `json:"pipeline,omitempty"`
	Started     time.Time     `json:"started"`
	Elapsed     time.Duration `json:"elapsed_ns"`
}

// Row is one size and op of the throughput table.
type Row struct {
	Size      string  `json:"size"`
	SizeBytes uint64  `json:"size_bytes"`
	Op        string  `json:"op"`
	Count     int     `json:"count"`
	Inflight  int     `json:"inflight"` // ours in flight (the stream's slots)
	Ours      float64 `json:"ours_mib_s"`
	OursOps   float64 `json:"ours_ops_s"`
	TCP       float64 `json:"tcp_mib_s,omitempty"` // against TCP
	TCPOps    float64 `json:"tcp_ops_s,omitempty"`
	Memcpy    float64 `json:"memcpy_mib_s,omitempty"` // against memcpy
	MemcpyOps float64 `json:"memcpy_ops_s,omitempty"`
	Ratio     float64 `json:"ratio"` // ours / the baseline
	OursP50us float64 `json:"ours_p50_us"`
	Errors    int     `json:"errors"`
}

// LatencyRow is the 8-byte Get round trip against the TCP ping-pong (ours
// alone against memcpy: the TCP fields are left out).
type LatencyRow struct {
	Size     uint64  `json:"size_bytes"`
	Count    int     `json:"count"`
	OursP50  float64 `json:"ours_p50_us"`
	OursP99  float64 `json:"ours_p99_us"`
	TCPP50   float64 `json:"tcp_p50_us,omitempty"`
	TCPP99   float64 `json:"tcp_p99_us,omitempty"`
	RatioP50 float64 `json:"ratio_p50,omitempty"`
	Errors   int     `json:"errors"`
	// Clock is what timed each round trip, both sides' (bench.LatencyClock:
	// "tsc" or "monotonic"); ClockFloorNs the median it adds to each.
	Clock        string  `json:"clock"`
	ClockFloorNs float64 `json:"clock_floor_ns"`
}

// PipelineRow is the 64-byte Put pipeline against the TCP one.
type PipelineRow struct {
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

// Errors is the number of failed and wrong operations of ours in r.
func (r *Report) Errors() int {
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

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func fmtLat(d time.Duration) string {
	if d < 10*time.Microsecond { // same-host round trips: every nanosecond shows
		return d.String()
	}
	return d.Round(100 * time.Nanosecond).String()
}

// timedBy records the clock that timed the round trips.
func (l *LatencyRow) timedBy() {
	c := bench.LatencyClock()
	l.Clock, l.ClockFloorNs = c.Source(), float64(c.Floor(1001).Nanoseconds())
}

// clockNote is the latency line's tail naming that clock.
func (l *LatencyRow) clockNote() string {
	return fmt.Sprintf("; timed with %s (adds %.0fns)", l.Clock, l.ClockFloorNs)
}
