package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

type benchConfig struct {
	op          string
	size        uint64
	count       int
	concurrency int
	warmup      int
	verify      bool
}

type benchResult struct {
	elapsed   time.Duration
	lat       []time.Duration // sorted
	bytes     uint64
	verified  uint64
	mismatch  int
	errs      int
	firstErr  error
	handleLen int
	backend   string
}

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "baseline-server" {
		// Hidden: the plain-TCP server `bench --baseline` starts.
		return cmdBaselineServer(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	peer := fs.String("peer", "", "peer manager address HOST:PORT, or a member name with --etcd")
	peerName := fs.String("peer-name", actor.DefaultName, "peer manager actor name")
	listen := fs.String("listen", "", "our actor-system address (default: the local address of the route to the peer, port 0)")
	op := fs.String("op", "put", "put or get")
	sizeS := fs.String("size", "1MiB", "bytes per operation (suffix KiB, MiB, GiB)")
	count := fs.Int("count", 1000, "operations to time (with --baseline, per size: default enough for about 2 GiB, 100 to 50000)")
	conc := fs.Int("concurrency", 1, "operations in flight (with --baseline: default 4)")
	warmup := fs.Int("warmup", 10, "untimed operations first")
	verify := fs.Bool("verify", false, "check every byte of every operation")
	timeout := fs.Duration("timeout", 10*time.Minute, "bound on the whole run")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed run to this file")
	memProfile := fs.String("memprofile", "", "write an allocation profile of the run to this file")
	var bl baselineFlags
	bl.register(fs)
	var c common
	c.register(fs)
	c.logLevel = "warn"
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if bl.on {
		return cmdBenchBaseline(ctx, &bl, benchBaselineArgs{
			peer: *peer, peerName: *peerName, listen: *listen,
			count: *count, concurrency: *conc, warmup: *warmup, verify: *verify, timeout: *timeout,
			set: set, c: &c,
		}, stdout, stderr)
	}
	if err := bl.checkUnset(set); err != nil {
		return err
	}
	if *peer == "" {
		return usagef("--peer is required")
	}
	if *op != "put" && *op != "get" {
		return usagef("--op %q: want put or get", *op)
	}
	size, err := parseSize(*sizeS)
	if err != nil {
		return usagef("%v", err)
	}
	if *count < 1 || *conc < 1 || *conc > 4096 || *warmup < 0 {
		return usagef("--count and --concurrency must be positive (concurrency at most 4096)")
	}
	if size*uint64(*conc) > 8<<30 {
		return usagef("--size × --concurrency over 8 GiB")
	}
	_, sl, err := c.logger(stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	pid, lis, err := c.net.peerAndListen(ctx, *peer, *peerName, *listen, sl)
	if err != nil {
		return err
	}
	n, err := startNode(ctx, lis, &c, sl, actor.DefaultName, true)
	if err != nil {
		return err
	}
	defer n.close()
	unfollow, err := c.net.followCluster(n, sl)
	if err != nil {
		return err
	}
	defer unfollow()
	cfg := benchConfig{op: *op, size: size, count: *count, concurrency: *conc, warmup: *warmup, verify: *verify}
	stopProfiles, err := startProfiles(*cpuProfile, *memProfile)
	if err != nil {
		return err
	}
	res, err := runBench(ctx, n.mgr, actor.NewClient(n.sys, pid), cfg)
	if perr := stopProfiles(); perr != nil && err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	printBench(stdout, cfg, c.conns, res)
	if res.errs > 0 {
		return fmt.Errorf("%d operations failed; first: %w", res.errs, res.firstErr)
	}
	if res.mismatch > 0 {
		return fmt.Errorf("%d operations moved wrong bytes", res.mismatch)
	}
	return nil
}

// runBench moves data between mgr and the peer behind peerClient.
func runBench(ctx context.Context, mgr *actor.Manager, peer *actor.Client, cfg benchConfig) (*benchResult, error) {
	total := cfg.size * uint64(cfg.concurrency)
	remote, err := peer.RequestBuffer(ctx, total, buffer.AccessReadWrite)
	if err != nil {
		return nil, fmt.Errorf("request peer buffer: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = peer.ReleaseBuffer(rctx, remote)
	}()
	local, err := mgr.Client().RequestBuffer(ctx, total, buffer.AccessReadWrite)
	if err != nil {
		return nil, fmt.Errorf("request local buffer: %w", err)
	}
	check, err := mgr.Client().RequestBuffer(ctx, total, buffer.AccessReadWrite)
	if err != nil {
		return nil, fmt.Errorf("request local buffer: %w", err)
	}
	qp, err := mgr.Client().RequestQueuePair(ctx, peer.PID())
	if err != nil {
		return nil, fmt.Errorf("request queue pair: %w", err)
	}
	defer qp.Release()
	localMem, _ := mgr.Bytes(local)
	checkMem, _ := mgr.Bytes(check)
	pattern := make([]byte, total)
	rand.Read(pattern)
	copy(localMem, pattern)
	if cfg.op == "get" {
		// The peer's buffer holds the pattern; every get must return it.
		if err := qp.Put(local, remote).Wait(ctx); err != nil {
			return nil, fmt.Errorf("seed peer buffer: %w", err)
		}
	}
	res := &benchResult{handleLen: remote.MarshalledSize(), backend: string(qp.Kind())}
	var mu sync.Mutex // guards res.errs, res.firstErr, res.mismatch
	fail := func(err error) {
		mu.Lock()
		res.errs++
		if res.firstErr == nil {
			res.firstErr = err
		}
		mu.Unlock()
	}
	lat := make([]time.Duration, cfg.count)
	var verified atomic.Uint64
	worker := func(slot int, timed bool, limit int64, start *atomic.Int64) {
		off := uint64(slot) * cfg.size
		l, _ := local.Slice(off, cfg.size)
		r, _ := remote.Slice(off, cfg.size)
		k, _ := check.Slice(off, cfg.size)
		lm := localMem[off : off+cfg.size]
		km := checkMem[off : off+cfg.size]
		pm := pattern[off : off+cfg.size]
		var wr queuepair.WorkRequest // reused: the data path allocates nothing
		for {
			i := start.Add(1) - 1
			if i >= limit || ctx.Err() != nil {
				return
			}
			if cfg.verify && cfg.op == "put" {
				stamp(lm, uint64(i))
			}
			if cfg.verify && cfg.op == "get" {
				clear(lm)
			}
			t0 := time.Now()
			if cfg.op == "put" {
				qp.PostPut(&wr, l, r)
			} else {
				qp.PostGet(&wr, l, r)
			}
			err := wr.Wait(ctx)
			d := time.Since(t0)
			if timed {
				lat[i] = d
			}
			if err != nil {
				fail(err)
				continue
			}
			if !cfg.verify {
				continue
			}
			ok := true
			if cfg.op == "put" {
				clear(km)
				if err := qp.Get(k, r).Wait(ctx); err != nil {
					fail(fmt.Errorf("verify read-back: %w", err))
					continue
				}
				ok = bytes.Equal(km, lm)
			} else {
				ok = bytes.Equal(lm, pm)
			}
			if !ok {
				mu.Lock()
				res.mismatch++
				mu.Unlock()
			}
			verified.Add(cfg.size)
		}
	}
	runPhase := func(n int, timed bool) time.Duration {
		var wg sync.WaitGroup
		var ctr atomic.Int64
		t0 := time.Now()
		for s := 0; s < cfg.concurrency; s++ {
			wg.Add(1)
			go func() { defer wg.Done(); worker(s, timed, int64(n), &ctr) }()
		}
		wg.Wait()
		return time.Since(t0)
	}
	if cfg.warmup > 0 {
		runPhase(cfg.warmup, false)
		res.errs, res.firstErr, res.mismatch = 0, nil, 0
		verified.Store(0)
	}
	res.elapsed = runPhase(cfg.count, true)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	res.bytes = cfg.size * uint64(cfg.count)
	res.verified = verified.Load()
	res.lat = lat
	slices.Sort(res.lat)
	return res, nil
}

// stamp writes the op number into every 4 KiB of p so a stale or misplaced
// transfer cannot pass verification.
func stamp(p []byte, seq uint64) {
	for o := 0; o+8 <= len(p); o += 4096 {
		binary.LittleEndian.PutUint64(p[o:], seq^uint64(o))
	}
	if len(p) < 8 {
		for j := range p {
			p[j] = byte(seq) + byte(j)
		}
	}
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(sorted)-1))
	return sorted[i]
}

func printBench(w io.Writer, cfg benchConfig, conns int, r *benchResult) {
	mib := float64(r.bytes) / (1 << 20)
	fmt.Fprintf(w, "op=%s size=%s count=%d concurrency=%d conns=%d backend=%s verify=%v\n",
		cfg.op, fmtSize(cfg.size), cfg.count, cfg.concurrency, conns, r.backend, cfg.verify)
	fmt.Fprintf(w, "throughput: %.1f MiB/s  %.0f ops/s  (%s in %v)\n",
		mib/r.elapsed.Seconds(), float64(cfg.count)/r.elapsed.Seconds(), fmtBytes(r.bytes), r.elapsed.Round(time.Microsecond))
	fmt.Fprintf(w, "latency: p50=%v p90=%v p99=%v max=%v\n",
		pct(r.lat, 50).Round(time.Microsecond), pct(r.lat, 90).Round(time.Microsecond),
		pct(r.lat, 99).Round(time.Microsecond), pct(r.lat, 100).Round(time.Microsecond))
	if cfg.verify {
		status := "ok"
		if r.mismatch > 0 || r.errs > 0 {
			status = "FAILED"
		}
		fmt.Fprintf(w, "verify: %s (%s checked, %d mismatches)\n", status, fmtBytes(r.verified), r.mismatch)
	}
	fmt.Fprintf(w, "errors: %d\n", r.errs)
}

// startProfiles starts the requested pprof profiles; the returned function
// stops them and writes the files.
func startProfiles(cpu, mem string) (func() error, error) {
	var cpuFile *os.File
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		cpuFile = f
	}
	if mem != "" {
		runtime.MemProfileRate = 4096
	}
	return func() error {
		if cpuFile != nil {
			pprof.StopCPUProfile()
			if err := cpuFile.Close(); err != nil {
				return err
			}
		}
		if mem != "" {
			f, err := os.Create(mem)
			if err != nil {
				return err
			}
			defer f.Close()
			return pprof.Lookup("allocs").WriteTo(f, 0)
		}
		return nil
	}, nil
}
