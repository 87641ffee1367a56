package baseline

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr/bench"
)

// What ours is compared with (Config.Against).
const (
	// AgainstTCP: a plain Go TCP stream, ping-pong and pipeline to a
	// Server (the default).
	AgainstTCP = "tcp"
	// AgainstMemcpy: one thread copying between two buffers of the same
	// size in this process (Memcpy): the bound of a same-host transfer.
	// There is no pipeline line, and the latency line has ours alone.
	AgainstMemcpy = "memcpy"
)

// Memory gives two buffers of size bytes each and a function that gives
// them back. bench --baseline takes them from its own manager, so the
// memcpy copies the same kind of memory (memfd-backed, shared mappings)
// as ours does.
type Memory func(ctx context.Context, size uint64) (dst, src []byte, release func(), err error)

// goMemory is the Memory of a nil Config.Memory: two Go slices.
func goMemory(_ context.Context, size uint64) ([]byte, []byte, func(), error) {
	return make([]byte, size), make([]byte, size), func() {}, nil
}

// memcpyCheckEvery is how many copies Memcpy makes between looks at its
// context.
const memcpyCheckEvery = 256

// Memcpy copies src into dst with Go's copy (one thread, the same pair of
// buffers every time, so the cache state is that of ours reusing its
// buffers) warmup times untimed, then count times, and returns the time of
// the count copies. It stops with ctx's error when ctx ends.
func Memcpy(ctx context.Context, dst, src []byte, count, warmup int) (time.Duration, error) {
	if len(dst) != len(src) {
		return 0, fmt.Errorf("baseline memcpy: buffers of %d and %d bytes", len(dst), len(src))
	}
	if err := copies(ctx, dst, src, warmup); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := copies(ctx, dst, src, count); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

func copies(ctx context.Context, dst, src []byte, n int) error {
	for i := 0; i < n; i++ {
		if i%memcpyCheckEvery == 0 && ctx.Err() != nil {
			return fmt.Errorf("baseline memcpy: %w", ctx.Err())
		}
		copy(dst, src)
	}
	return nil
}

// memcpy measures the memcpy of one row: count copies of sz bytes.
func (r *runner) memcpy(ctx context.Context, sz uint64, count int) (time.Duration, error) {
	mem := r.cfg.Memory
	if mem == nil {
		mem = goMemory
	}
	dst, src, release, err := mem(ctx, sz)
	if err != nil {
		return 0, fmt.Errorf("memcpy buffers: %w", err)
	}
	defer release()
	if uint64(len(dst)) < sz || uint64(len(src)) < sz {
		return 0, fmt.Errorf("memcpy buffers of %d and %d bytes, want %d", len(dst), len(src), sz)
	}
	for i := range src[:sz] {
		src[i] = byte(i)
	}
	return Memcpy(ctx, dst[:sz], src[:sz], count, r.cfg.Warmup)
}

func (r *runner) memcpyHeader() {
	c := r.cfg
	fmt.Fprintf(r.w, "placement: %s\n", describeSameHost(c.Placement, c.ExternalManager))
	fmt.Fprintf(r.w, "manager %s; conns=%d concurrency=%d warmup=%d GOMAXPROCS=%d verify=%v\n",
		c.ManagerAddr, c.Conns, c.Concurrency, c.Warmup, r.rep.GOMAXPROCS, c.Verify)
	fmt.Fprintln(r.w, "ratio = ours / memcpy (Go copy between two buffers of the same size in this process, one thread, the same count, the same pair of buffers every time)")
	r.tableHeader("memcpy")
}

// latencyAlone reports ours' 8-byte Get round trip with nothing to
// compare it with (a memcpy of 8 bytes is not a round trip).
func (r *runner) latencyAlone(res *bench.Result) {
	c := r.cfg
	p50, p99 := bench.Percentile(res.Lat, 50), bench.Percentile(res.Lat, 99)
	r.rep.Latency = &LatencyRow{
		Size: LatSize, Count: c.LatCount, OursP50: bench.Micros(p50), OursP99: bench.Micros(p99),
		Errors: r.note("latency get 8B", res),
	}
	r.rep.Latency.timedBy()
	fmt.Fprintf(r.w, "latency: %dB get, one at a time, n=%d: ours p50 %s p99 %s; placement %s%s\n",
		LatSize, c.LatCount, fmtLat(p50), fmtLat(p99), c.Placement.Mode, r.rep.Latency.clockNote())
}

// describeSameHost is Placement.Describe for a run against memcpy: no
// baseline server, and the memcpy runs in the bench process.
func describeSameHost(p Placement, extManager bool) string {
	var d string
	switch p.Mode {
	case "same":
		d = fmt.Sprintf("same (bench, its memcpy and the manager all on CPU %d)", p.BenchCPU)
	case "split":
		d = fmt.Sprintf("split (bench and its memcpy on CPU %d; the manager on CPU %d)", p.BenchCPU, p.ServerCPU)
	default:
		d = "any (no pinning; the scheduler places bench, its memcpy and the manager)"
	}
	if extManager && p.Mode != "any" {
		d += "; the --peer manager was not started by bench and is not pinned"
	}
	return d
}
