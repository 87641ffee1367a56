//go:build linux

package agenthosts

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/node"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// A worker is this test binary run again inside a host (TestMain sees
// RDMAMGR_AGWORKER=1): one node, one shared buffer that every other worker
// Puts into (a slot each) and Gets from (its first slot holds the owner's
// own bytes), and the loops the test asks for on stdin.

// Environment of a worker.
const (
	envWorker = "RDMAMGR_AGWORKER" // "1"
	envID     = "AGW_ID"           // h1p1
	envIndex  = "AGW_INDEX"        // 0-based over all workers
	envAll    = "AGW_ALL"          // number of workers
	envListen = "AGW_LISTEN"       // host:0
	envSecret = "AGW_SECRET"       // the deployment's secret (as its file holds it)
	envSlot   = "AGW_SLOT"         // slot size in bytes
	envBench  = "AGW_BENCH"        // bench buffer size (0: none)
	envAgent  = "AGW_AGENT"        // the host agent's socket ("": direct)
	envLinger = "AGW_LINGER"       // actor.Config.RouteLinger ("": its default)
)

// opTimeout bounds every operation and queue-pair request of a worker.
const opTimeout = 10 * time.Second

type worker struct {
	id         string
	index, all int
	slot       int
	n          *node.Node
	shared     buffer.Buffer // (1+all) slots: the owner's bytes, then one per writer
	bench      buffer.Buffer
	local      buffer.Buffer // 2 slots (src, dst) per worker index
	localMem   []byte

	outMu sync.Mutex

	mu    sync.Mutex
	peers []peer
	qps   map[string]*queuepair.QueuePair // by peer id, kept across runs
}

type peer struct {
	info   peerInfo
	pid    *protoactor.PID
	shared buffer.Buffer
	bench  buffer.Buffer
	owner  []byte // the bytes of its first slot
}

func workerMain() int {
	if dir := os.Getenv("RDMAMGR_AGPROFILE"); dir != "" { // a figures run's CPU profiles
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%s-%d.pprof", os.Getenv(envID), os.Getpid())))
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	w, err := startWorker()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	defer w.n.Close()
	return w.serve()
}

func startWorker() (*worker, error) {
	w := &worker{id: os.Getenv(envID), qps: map[string]*queuepair.QueuePair{}}
	var err error
	if w.index, err = strconv.Atoi(os.Getenv(envIndex)); err != nil {
		return nil, err
	}
	if w.all, err = strconv.Atoi(os.Getenv(envAll)); err != nil {
		return nil, err
	}
	if w.slot, err = strconv.Atoi(os.Getenv(envSlot)); err != nil {
		return nil, err
	}
	secret, err := backend.NewSecret([]byte(os.Getenv(envSecret)))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := node.Config{Listen: os.Getenv(envListen), Secret: secret}
	if l := os.Getenv(envLinger); l != "" {
		if cfg.Manager.RouteLinger, err = time.ParseDuration(l); err != nil {
			return nil, err
		}
	}
	if err := withAgent(&cfg, os.Getenv(envAgent)); err != nil {
		return nil, err
	}
	if w.n, err = node.Start(ctx, cfg); err != nil {
		return nil, err
	}
	me := w.n.Client()
	fail := func(err error) (*worker, error) { w.n.Close(); return nil, err }
	if w.shared, err = me.RequestBuffer(ctx, uint64((1+w.all)*w.slot), buffer.AccessReadWrite); err != nil {
		return fail(err)
	}
	mem, err := w.n.Manager().Bytes(w.shared)
	if err != nil {
		return fail(err)
	}
	fillPattern(mem[:w.slot], ownerSeed(w.index))
	if w.local, err = me.RequestBuffer(ctx, uint64(2*w.all*w.slot), buffer.AccessReadWrite); err != nil {
		return fail(err)
	}
	if w.localMem, err = w.n.Manager().Bytes(w.local); err != nil {
		return fail(err)
	}
	if size, _ := strconv.Atoi(os.Getenv(envBench)); size > 0 {
		if w.bench, err = me.RequestBuffer(ctx, uint64(size), buffer.AccessReadWrite); err != nil {
			return fail(err)
		}
	}
	return w, nil
}

// serve announces the worker and runs commands until quit or stdin ends.
func (w *worker) serve() int {
	fmt.Printf("ready %s\n", w.n.Addr())
	hello := &peerInfo{ID: w.id, Index: w.index, Addr: w.n.Addr(), Shared: marshal(w.shared)}
	if !w.bench.IsZero() {
		hello.Bench = marshal(w.bench)
	}
	w.say(event{Ev: "hello", Hello: hello, Data: w.n.DataAddr()})
	var (
		runStop chan struct{}
		runDone chan struct{}
	)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			w.say(event{Ev: "fatal", Err: err.Error()})
			return 1
		}
		switch c.Cmd {
		case "peers":
			if err := w.setPeers(c.Peers); err != nil {
				w.say(event{Ev: "fatal", Err: err.Error()})
				return 1
			}
			w.say(event{Ev: "peers"})
		case "run":
			if runDone != nil {
				<-runDone
			}
			runStop, runDone = make(chan struct{}), make(chan struct{})
			go func(c command, stop, done chan struct{}) {
				defer close(done)
				w.say(event{Ev: "started"})
				w.say(event{Ev: "result", Result: w.run(c, stop)})
			}(c, runStop, runDone)
		case "stop":
			if runStop != nil {
				close(runStop)
				<-runDone
				runStop, runDone = nil, nil
			}
		case "reset": // give up every queue pair (their routes linger, then end)
			if runDone != nil {
				<-runDone
			}
			w.releaseQPs()
			w.say(event{Ev: "reset"})
		case "stats":
			w.say(event{Ev: "stats", Stats: stats()})
		case "bench":
			w.say(event{Ev: "bench", Bench: w.runBench(c.Bench)})
		case "quit":
			if runStop != nil {
				close(runStop)
				<-runDone
			}
			w.releaseQPs()
			return 0
		default:
			w.say(event{Ev: "fatal", Err: "unknown command " + c.Cmd})
		}
	}
	if runStop != nil {
		close(runStop)
		<-runDone
	}
	w.releaseQPs()
	return 0
}

func (w *worker) say(e event) {
	b, _ := json.Marshal(e)
	w.outMu.Lock()
	defer w.outMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

func (w *worker) setPeers(infos []peerInfo) error {
	var ps []peer
	for _, in := range infos {
		if in.ID == w.id {
			continue
		}
		p := peer{info: in, pid: w.n.ClientOf(in.Addr, "").PID(), owner: make([]byte, w.slot)}
		var err error
		if p.shared, err = unmarshal(in.Shared); err != nil {
			return fmt.Errorf("%s's handle: %w", in.ID, err)
		}
		if len(in.Bench) > 0 {
			if p.bench, err = unmarshal(in.Bench); err != nil {
				return fmt.Errorf("%s's bench handle: %w", in.ID, err)
			}
		}
		fillPattern(p.owner, ownerSeed(in.Index))
		ps = append(ps, p)
	}
	w.mu.Lock()
	w.peers = ps
	w.mu.Unlock()
	return nil
}

// qp returns the worker's queue pair to p, asking for one if it has none.
func (w *worker) qp(p *peer) (*queuepair.QueuePair, error) {
	w.mu.Lock()
	q := w.qps[p.info.ID]
	w.mu.Unlock()
	if q != nil {
		return q, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	q, err := w.n.Client().RequestQueuePair(ctx, p.pid)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.qps[p.info.ID] = q
	w.mu.Unlock()
	return q, nil
}

// dropQP gives up the queue pair to p after a failure: the next operation
// asks for a new one (a new route, if the old one ended).
func (w *worker) dropQP(p *peer) {
	w.mu.Lock()
	q := w.qps[p.info.ID]
	delete(w.qps, p.info.ID)
	w.mu.Unlock()
	if q != nil {
		q.Release()
	}
}

func (w *worker) releaseQPs() {
	w.mu.Lock()
	qs := w.qps
	w.qps = map[string]*queuepair.QueuePair{}
	w.mu.Unlock()
	for _, q := range qs {
		q.Release()
	}
}

func marshal(b buffer.Buffer) []byte {
	out, err := proto.Marshal(b.Proto())
	if err != nil {
		panic(err)
	}
	return out
}

func unmarshal(p []byte) (buffer.Buffer, error) {
	var m rdmapb.Buffer
	if err := proto.Unmarshal(p, &m); err != nil {
		return buffer.Buffer{}, err
	}
	return buffer.FromProto(&m)
}

// stats reads the worker's goroutines, RSS and Go memory (live: after a
// collection).
func stats() *workerStats {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return &workerStats{Goroutines: runtime.NumGoroutine(), RSSKiB: rssKiB(os.Getpid()),
		HeapKiB: int64(ms.HeapInuse+ms.StackInuse) >> 10}
}

// rssKiB reads VmRSS of pid (0 when it cannot).
func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
