//go:build linux

package agenthosts

import (
	"fmt"
	"testing"
	"time"
)

// linger is the workers' route linger in agent mode: after the agent's
// restart, routes made without it end this long after their last queue
// pair.
const linger = time.Second

// agentConnsPerPair is the data connections between two hosts in agent
// mode: one route of agentRoutes connections each way.
const agentConnsPerPair = 2 * agentRoutes

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
