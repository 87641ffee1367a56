//go:build linux

package agenthosts

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/proc"
)

// linger is the workers' route linger in agent mode: after the agent's
// restart, routes made without it end this long after their last queue
// pair.
const linger = time.Second

// agentConnsPerPair is the data connections between two hosts in agent
// mode: agentRoutes, half on each agent's route to the other.
const agentConnsPerPair = agentRoutes

// agentKilled kills h2's agent while every process moves bytes with every
// other: operations between h2's processes and other hosts fail with a
// sentinel that says the path is gone (never a wrong byte); everything else
// (h1 with h3, and within each host on shm) goes on without an error. The
// agent is restarted; without restarting any process, every pair works
// through the agents again.
func (c *cluster) agentKilled(t *testing.T, round int) {
	h2 := c.net.Hosts[1]
	ws := c.live()
	c.startRun(t, round, ws)
	_ = c.agents[1].p.Kill()
	t.Logf("killed %s's agent (pid %d) mid-run", h2.Name, c.agents[1].p.Pid())
	for _, w := range ws {
		across := map[string]bool{}
		for _, o := range ws {
			if w.host != o.host && (w.host == h2 || o.host == h2) {
				across[o.id] = true
			}
		}
		c.waitFailed(t, w, across)
	}
	for _, w := range ws {
		w.send(t, command{Cmd: "stop"})
	}
	res := c.results(t, ws)
	allowed := map[string]bool{"ErrPeerGone": true, "ErrClosed": true, "ErrUnknownPeer": true}
	byID := map[string]*workerProc{}
	for _, w := range ws {
		byID[w.id] = w
	}
	told := map[string]bool{}
	for _, w := range ws {
		for id, r := range res[w.id] {
			o := byID[id]
			if r.Mismatch != 0 {
				t.Errorf("%s -> %s: %d wrong bytes: %s", w.id, id, r.Mismatch, r.Bad)
			}
			crosses := w.host != o.host && (w.host == h2 || o.host == h2)
			if !crosses {
				if len(r.Errs) != 0 || r.OK == 0 {
					t.Errorf("%s -> %s: %d ok, errors %v %v", w.id, id, r.OK, r.Errs, r.First)
				}
				continue
			}
			for name := range r.Errs {
				if !allowed[name] {
					t.Errorf("%s -> %s (through the killed agent): %d × %s: %s", w.id, id, r.Errs[name], name, r.First[name])
				}
			}
			if len(r.Errs) == 0 {
				t.Errorf("%s -> %s (through the killed agent): no error in %d iterations (routes %v)", w.id, id, r.Iters, r.Kinds)
			}
			t.Logf("%s -> %s (through the killed agent): %d ok, routes %v, then %v: %v", w.id, id, r.OK, r.Kinds, r.Errs, sortedValues(r.First))
			if strings.Contains(r.First["ErrPeerGone"], "host agent gone") {
				told[w.id] = true
			}
		}
	}
	// h2's processes are told why: their agent is gone.
	for _, w := range ws {
		if w.host == h2 && !told[w.id] {
			t.Errorf("%s: no operation failed with \"host agent gone\"", w.id)
		}
	}
	c.agents[1].restart(t)
	t.Logf("restarted %s's agent", h2.Name)
	// The processes re-attach on their own (every second): bounded rounds
	// until every pair works again (the routes made while the agent was
	// gone are direct, and stay while they work).
	var last string
	for try := 0; try < 30; try++ {
		res := c.round(t, command{Cmd: "run", Round: round + 1 + try, Max: 2}, ws)
		last = ""
		kinds := map[string]int{}
		for _, w := range ws {
			for id, r := range res[w.id] {
				if r.Mismatch != 0 {
					t.Fatalf("after the restart, %s -> %s: %d wrong bytes: %s", w.id, id, r.Mismatch, r.Bad)
				}
				if r.OK != 2 {
					last += fmt.Sprintf("%s -> %s: %d of 2 ok, routes %v, errors %v %v\n", w.id, id, r.OK, r.Kinds, r.Errs, sortedValues(r.First))
				}
				for k, n := range r.Kinds {
					kinds[k] += n
				}
			}
		}
		if last == "" {
			t.Logf("every pair works again after %d rounds (operations by route kind: %v)", try+1, kinds)
			break
		}
		time.Sleep(time.Second)
	}
	if last != "" {
		t.Fatalf("after the agent's restart, pairs still fail:\n%s", last)
	}
	// Every queue pair given up, the direct routes end after their linger;
	// new ones go through the agents again, and the data connections
	// between hosts are the agents' alone.
	for _, w := range ws {
		w.send(t, command{Cmd: "reset"})
		w.wait(t, "reset", time.Minute)
	}
	time.Sleep(linger + time.Second)
	c.allToAll(t, round+40, "agent")
	c.checkConns(t, agentConnsPerPair)
}

// agentBuffers returns the regions a's registry holds (its proxies of
// attached processes' regions), from `rdmamgr status` run inside its host.
func (c *cluster) agentBuffers(t *testing.T, a *agentProc) int {
	t.Helper()
	bin, err := rdmamgrBin()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out proc.Buffer
	path, argv := a.host.Wrap(bin, "status", "--peer", a.addr, "--timeout", "20s",
		"--tls-ca", filepath.Join(c.certs(), "ca.crt"),
		"--tls-cert", filepath.Join(c.certs(), a.host.Name+".crt"), "--tls-key", filepath.Join(c.certs(), a.host.Name+".key"))
	if err := proc.Run(ctx, proc.Spec{Path: path, Args: argv, Stdout: &out, Stderr: &out}); err != nil {
		t.Fatalf("%s agent's status: %v\n%s", a.host.Name, err, out.String())
	}
	m := regexp.MustCompile(`(?m)^buffers: (\d+),`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("%s agent's status without a buffers line:\n%s", a.host.Name, out.String())
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// released checks that the agents let go of every region of the processes
// that ended (killed or quit): their proxies are revoked and released once
// the process's attachment ends (polled for 10 s).
func (c *cluster) released(t *testing.T) {
	t.Helper()
	var held []int
	for _, a := range c.agents {
		held = append(held, c.agentBuffers(t, a))
	}
	t.Logf("regions held by the agents of h1, h2, h3 while the processes run: %v", held)
	if held[0] == 0 || held[2] == 0 {
		t.Fatalf("the agents hold no region of their processes: nothing to check")
	}
	// A worker has two regions (its shared buffer, its local one): an
	// agent holds at most those of its live processes, none of the
	// killed one's.
	for i, h := range c.net.Hosts {
		live := 0
		for _, w := range c.live() {
			if w.host == h {
				live++
			}
		}
		if held[i] > 2*live {
			t.Errorf("%s agent holds %d regions for %d live processes of two regions each", h.Name, held[i], live)
		}
	}
	var wg sync.WaitGroup
	for _, w := range c.live() {
		wg.Add(1)
		go func() { defer wg.Done(); w.quit(t) }()
	}
	wg.Wait()
	for _, a := range c.agents {
		n := -1
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if n = c.agentBuffers(t, a); n == 0 || time.Now().After(deadline) {
				break
			}
		}
		if n != 0 {
			t.Errorf("%s agent holds %d regions after every process ended", a.host.Name, n)
		}
	}
}
