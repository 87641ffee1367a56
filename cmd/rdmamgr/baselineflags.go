package main

import (
	"context"
	"flag"
	"strings"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/bench/baseline"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// The flags of `rdmamgr bench --baseline`, their lists, and what --against
// memcpy needs from the manager.

// baselineFlags are the flags of bench that only --baseline uses.
type baselineFlags struct {
	on           bool
	sizes        string
	ops          string
	placement    string
	baselinePeer string
	latCount     int
	pipeCount    int
	pipeDepth    int
	against      string
	procs        int
}

var baselineOnlyFlags = []string{"sizes", "ops", "placement", "baseline-peer", "lat-count", "pipeline-count", "pipeline-depth", "against", "procs"}

// tcpOnlyFlags are the --baseline flags of the plain-TCP comparison alone.
var tcpOnlyFlags = []string{"baseline-peer", "pipeline-count", "pipeline-depth", "procs"}

// Defaults of --baseline: the sizes against TCP and against memcpy (the
// same-host table of the README, from 8 bytes up).
const (
	baselineSizes = "4KiB,64KiB,1MiB,16MiB"
	sameHostSizes = "8B,4KiB,64KiB,1MiB,16MiB"
	procsSizes    = "64B,4KiB,64KiB"
)

func (b *baselineFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&b.on, "baseline", false, "run the size × op table, an 8-byte Get latency and a 64-byte Put pipeline, each against a plain Go TCP baseline (or, --against memcpy, the table against a single-thread memcpy and the latency), and print the ratios (starts its own manager unless --peer is given)")
	fs.StringVar(&b.sizes, "sizes", baselineSizes, "with --baseline: comma-separated sizes (against memcpy: "+sameHostSizes+")")
	fs.StringVar(&b.ops, "ops", "put,get", "with --baseline: comma-separated ops (put, get)")
	fs.StringVar(&b.placement, "placement", "any", "with --baseline: any (no pinning), same (bench and servers on one CPU) or split (bench on one CPU, servers on another)")
	fs.StringVar(&b.baselinePeer, "baseline-peer", "", "with --baseline: HOST:PORT of a running \"rdmamgr baseline-server\" (default: start one)")
	fs.IntVar(&b.latCount, "lat-count", 5000, "with --baseline: round trips timed for the 8-byte latency")
	fs.IntVar(&b.pipeCount, "pipeline-count", 100000, "with --baseline: operations timed for the 64-byte pipeline")
	fs.IntVar(&b.pipeDepth, "pipeline-depth", 64, "with --baseline: operations in flight in the 64-byte pipeline")
	fs.IntVar(&b.procs, "procs", 0, "with --baseline: run the size × op table as `N` bench processes against the one manager, their timed phases started together, against N plain TCP streams, and print the totals (no latency or pipeline; sizes default "+procsSizes+")")
	fs.StringVar(&b.against, "against", "", "with --baseline: `tcp` (a plain Go TCP stream, ping-pong and pipeline) or memcpy (one thread copying between two buffers of the same size: the same-host bound; 1 operation in flight unless --concurrency). Default: memcpy with --backend shm, else tcp")
}

// resolveAgainst returns what --baseline compares with: --against, else
// memcpy for --backend shm and tcp otherwise.
func (b *baselineFlags) resolveAgainst(backendFlag string, set map[string]bool) (string, error) {
	against := b.against
	switch against {
	case "":
		against = baseline.AgainstTCP
		if backendFlag == string(backend.KindSHM) {
			against = baseline.AgainstMemcpy
		}
	case baseline.AgainstTCP, baseline.AgainstMemcpy:
	default:
		return "", usagef("--against %q: want tcp or memcpy", against)
	}
	if against == baseline.AgainstMemcpy {
		for _, n := range tcpOnlyFlags {
			if set[n] {
				return "", usagef("--%s is of the comparison with plain TCP, not with --against memcpy", n)
			}
		}
	}
	return against, nil
}

func (b *baselineFlags) checkUnset(set map[string]bool) error {
	for _, n := range baselineOnlyFlags {
		if set[n] {
			return usagef("--%s needs --baseline", n)
		}
	}
	return nil
}

func parseSizeList(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		v, err := parseSize(f)
		if err != nil {
			return nil, usagef("--sizes: %v", err)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, usagef("--sizes %q: want a comma-separated list of sizes", s)
	}
	return out, nil
}

func parseOpList(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(strings.ToLower(f))
		switch f {
		case "":
			continue
		case "put", "get":
			out = append(out, f)
		default:
			return nil, usagef("--ops: %q: want put or get", f)
		}
	}
	if len(out) == 0 {
		return nil, usagef("--ops %q: want put, get or put,get", s)
	}
	return out, nil
}

// managerMemory is the memory of the memcpy baseline: two buffers of m's,
// memfd-backed like the ones ours copies between.
func managerMemory(m *actor.Manager) baseline.Memory {
	return func(ctx context.Context, size uint64) ([]byte, []byte, func(), error) {
		var got []buffer.Buffer
		release := func() {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			for _, b := range got {
				_ = m.Client().ReleaseBuffer(rctx, b)
			}
		}
		var mem [2][]byte
		for i := range mem {
			b, err := m.Client().RequestBuffer(ctx, size, buffer.AccessReadWrite)
			if err != nil {
				release()
				return nil, nil, nil, err
			}
			got = append(got, b)
			if mem[i], err = m.Bytes(b); err != nil {
				release()
				return nil, nil, nil, err
			}
		}
		return mem[0], mem[1], release, nil
	}
}
