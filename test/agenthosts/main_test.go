//go:build linux

package agenthosts

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
	"github.com/rdmamgr/rdmamgr/test/netns"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) == "1" {
		os.Exit(workerMain())
	}
	if url := os.Getenv(envFetch); url != "" {
		os.Exit(fetchMain(url))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rdmamgr-agenthosts-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	netns.Sweep()
	return m.Run()
}

// binDir holds the rdmamgr binary the agents run (removed after the tests).
var binDir string

// rdmamgrBin builds cmd/rdmamgr once (for the agents) and returns its path.
// Under -race the agents get the race detector too: one that reports a race
// exits 66 when stopped, which fails the test.
var rdmamgrBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "rdmamgr")
	const pkg = "github.com/rdmamgr/rdmamgr/cmd/rdmamgr"
	if !raceEnabled {
		return bin, proc.Build(pkg, bin)
	}
	if out, err := exec.Command("go", "build", "-race", "-o", bin, pkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -race %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
})

// cluster is hosts × procs workers on namespaced hosts, each host with its
// agent in agent mode.
type cluster struct {
	t       *testing.T
	net     *netns.Net
	agent   bool
	dir     string // agents' sockets
	secret  string // hex
	slot    int
	bench   int
	procs   int
	workers []*workerProc
	agents  []*agentProc // by host, agent mode only
}

// workerProc is the test's side of one worker.
type workerProc struct {
	host   *netns.Host
	id     string
	index  int
	p      *proc.Proc
	in     *os.File
	events *eventLog
	log    *proc.Buffer
	info   peerInfo
	data   string // its TCP data listener
	dead   bool
}

type clusterOpts struct {
	hosts, procs int
	agent        bool
	slot, bench  int
}

// newCluster makes the hosts (and agents), starts the workers and tells
// each of all the others; everything ends when t does.
func newCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	c := &cluster{t: t, net: netns.New(t, o.hosts), agent: o.agent, dir: t.TempDir(), secret: hex.EncodeToString(key),
		slot: o.slot, bench: o.bench, procs: o.procs}
	if o.agent {
		for _, h := range c.net.Hosts {
			c.agents = append(c.agents, c.startAgent(h))
		}
	}
	all := o.hosts * o.procs
	errs := make(chan error, all)
	c.workers = make([]*workerProc, all)
	for hi, h := range c.net.Hosts {
		for pi := 0; pi < o.procs; pi++ {
			idx := hi*o.procs + pi
			go func() {
				w, err := c.startWorker(h, idx, fmt.Sprintf("%sp%d", h.Name, pi+1), all)
				c.workers[idx] = w
				errs <- err
			}()
		}
	}
	for range all {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var infos []peerInfo
	for _, w := range c.workers {
		infos = append(infos, w.info)
	}
	for _, w := range c.workers {
		w.send(t, command{Cmd: "peers", Peers: infos})
	}
	for _, w := range c.workers {
		w.wait(t, "peers", 30*time.Second)
	}
	return c
}

func (c *cluster) startWorker(h *netns.Host, idx int, id string, all int) (*workerProc, error) {
	w := &workerProc{host: h, id: id, index: idx, events: newEventLog(), log: &proc.Buffer{}}
	r, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	w.in = wr
	env := []string{envWorker + "=1", envID + "=" + id, envIndex + "=" + strconv.Itoa(idx), envAll + "=" + strconv.Itoa(all),
		envListen + "=" + h.Addr + ":0", envSecret + "=" + c.secret, envSlot + "=" + strconv.Itoa(c.slot),
		envBench + "=" + strconv.Itoa(c.bench)}
	if c.agent {
		env = append(env, envAgent+"="+c.agentSocket(h), envLinger+"="+linger.String())
	}
	path, args := h.Wrap(os.Args[0], "-test.run=^$")
	w.p, err = proc.Start(context.Background(), proc.Spec{Name: id, Path: path, Args: args, Env: env,
		Stdin: r, Stdout: w.events, Stderr: w.log})
	if err != nil {
		wr.Close()
		return nil, fmt.Errorf("%s: %w\n%s", id, err, w.log)
	}
	c.t.Cleanup(func() { w.stop(c.t) })
	e, err := w.events.next("hello", 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", id, err, w.log)
	}
	w.info, w.data = *e.Hello, e.Data
	return w, nil
}

// send writes one command to the worker.
func (w *workerProc) send(t *testing.T, c command) {
	t.Helper()
	b, _ := json.Marshal(c)
	if _, err := w.in.Write(append(b, '\n')); err != nil {
		t.Fatalf("%s: %v\n%s", w.id, err, w.log)
	}
}

// wait returns the worker's next event named ev.
func (w *workerProc) wait(t *testing.T, ev string, d time.Duration) event {
	t.Helper()
	e, err := w.events.next(ev, d)
	if err != nil {
		t.Fatalf("%s: %v\nstderr:\n%s", w.id, err, w.log)
	}
	return e
}

// stop asks the worker to quit (closing its stdin) and waits; it must exit
// 0 unless it was killed.
func (w *workerProc) stop(t *testing.T) {
	w.in.Close()
	select {
	case <-w.p.Done():
	case <-time.After(30 * time.Second):
	}
	if err := w.p.Stop(time.Second); err != nil && !w.dead {
		t.Errorf("%s: %v\n%s", w.id, err, w.log)
	}
}

// quit asks the worker to end (closing its stdin: it gives up its queue
// pairs and closes its node) and waits; it must exit 0.
func (w *workerProc) quit(t *testing.T) {
	t.Helper()
	w.in.Close()
	select {
	case <-w.p.Done():
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not quit within 30 s", w.id)
	}
	if err := w.p.Stop(time.Second); err != nil {
		t.Errorf("%s: %v\n%s", w.id, err, w.log)
	}
	w.dead = true
}

// kill ends the worker with SIGKILL.
func (w *workerProc) kill() {
	w.dead = true
	_ = w.p.Kill()
}

// eventLog collects a worker's stdout and hands out its events.
type eventLog struct {
	mu     sync.Mutex
	buf    []byte
	events []event
	taken  []bool
	more   chan struct{}
}

func newEventLog() *eventLog { return &eventLog{more: make(chan struct{}, 1)} }

func (l *eventLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := l.buf[:i]
		var e event
		if len(line) > 0 && line[0] == '{' && json.Unmarshal(line, &e) == nil {
			l.events = append(l.events, e)
			l.taken = append(l.taken, false)
		}
		l.buf = l.buf[i+1:]
	}
	l.mu.Unlock()
	select {
	case l.more <- struct{}{}:
	default:
	}
	return len(p), nil
}

// next takes the first event named ev not yet taken (a fatal event is an
// error), waiting at most d.
func (l *eventLog) next(ev string, d time.Duration) (event, error) {
	deadline := time.After(d)
	for {
		l.mu.Lock()
		for i, e := range l.events {
			if l.taken[i] || (e.Ev != ev && e.Ev != "fatal") {
				continue
			}
			l.taken[i] = true
			l.mu.Unlock()
			if e.Ev == "fatal" {
				return e, fmt.Errorf("worker: %s", e.Err)
			}
			return e, nil
		}
		l.mu.Unlock()
		select {
		case <-l.more:
		case <-deadline:
			return event{}, fmt.Errorf("no %q event within %v", ev, d)
		}
	}
}

// drop takes every event named ev not yet taken (those of an earlier run).
func (l *eventLog) drop(ev string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, e := range l.events {
		if e.Ev == ev {
			l.taken[i] = true
		}
	}
}
