//go:build linux

package agenthosts

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// Shape of the namespaced-host tests: 3 hosts × 4 processes.
const (
	nHosts = 3
	nProcs = 4
	slot   = 16 << 10
	// iters is one checked round's iterations per pair (each a Put, a Get
	// of it and a Get of the owner's bytes).
	iters = 8
	// tcpConns is the TCP backend's connections per route (its default).
	tcpConns = 2
)

// TestDirect runs 3 hosts × 4 processes with no agent: every process its
// own node, a route of its own to every process of another host.
func TestDirect(t *testing.T) {
	c := newCluster(t, clusterOpts{hosts: nHosts, procs: nProcs, slot: slot})
	t.Run("AllToAll", func(t *testing.T) { c.allToAll(t, 1, "tcp") })
	t.Run("Connections", func(t *testing.T) {
		// Each process has a route to each process of every other host
		// and it to it: 2 × P² routes of tcpConns connections per pair.
		c.checkConns(t, 2*nProcs*nProcs*tcpConns)
	})
	t.Run("ProcessKilled", func(t *testing.T) { c.processKilled(t, 2) })
}

// allToAll runs a round in which every worker Puts to and Gets from every
// other, and checks every byte and the route each pair took: shm within a
// host, cross (the kind of the route between hosts) else.
func (c *cluster) allToAll(t *testing.T, round int, cross string) {
	res := c.round(t, command{Cmd: "run", Round: round, Max: iters}, c.live())
	for _, w := range c.live() {
		for _, o := range c.live() {
			if o == w {
				continue
			}
			r := res[w.id][o.id]
			if r == nil {
				t.Errorf("%s -> %s: no result", w.id, o.id)
				continue
			}
			if r.OK != iters || r.Mismatch != 0 || len(r.Errs) != 0 {
				t.Errorf("%s -> %s: %d of %d iterations checked out; errors %v %v; %d wrong: %s", w.id, o.id, r.OK, iters, r.Errs, r.First, r.Mismatch, r.Bad)
			}
			want := cross
			if o.host == w.host {
				want = "shm"
			}
			if len(r.Kinds) != 1 || r.Kinds[want] == 0 {
				t.Errorf("%s -> %s: routes %v, want %s", w.id, o.id, r.Kinds, want)
			}
		}
	}
}

// startRun starts an unbounded run (bounded by 2^20 iterations and by
// stop) on ws and returns once every worker had an iteration check out with
// every peer.
func (c *cluster) startRun(t *testing.T, round int, ws []*workerProc) {
	t.Helper()
	for _, w := range ws {
		w.events.drop("warm")
		w.events.drop("failed")
		w.send(t, command{Cmd: "run", Round: round, Max: 1 << 20})
	}
	for _, w := range ws {
		w.wait(t, "warm", 2*time.Minute)
	}
}

// waitFailed waits (at most a minute) until w saw an operation with each of
// peers fail.
func (c *cluster) waitFailed(t *testing.T, w *workerProc, peers map[string]bool) {
	t.Helper()
	left := len(peers)
	seen := map[string]bool{}
	deadline := time.Now().Add(time.Minute)
	for left > 0 {
		e, err := w.events.next("failed", time.Until(deadline))
		if err != nil {
			t.Fatalf("%s: %d of its peers %v never failed: %v\n%s", w.id, left, peers, err, w.log)
		}
		if peers[e.Peer] && !seen[e.Peer] {
			seen[e.Peer] = true
			left--
		}
	}
}

// live returns the workers not killed.
func (c *cluster) live() []*workerProc {
	var ws []*workerProc
	for _, w := range c.workers {
		if !w.dead {
			ws = append(ws, w)
		}
	}
	return ws
}

// round sends cmd to ws, waits for each one's result and returns them by
// worker id and peer id.
func (c *cluster) round(t *testing.T, cmd command, ws []*workerProc) map[string]map[string]*peerResult {
	t.Helper()
	for _, w := range ws {
		w.send(t, cmd)
	}
	return c.results(t, ws)
}

func (c *cluster) results(t *testing.T, ws []*workerProc) map[string]map[string]*peerResult {
	t.Helper()
	out := map[string]map[string]*peerResult{}
	for _, w := range ws {
		out[w.id] = w.wait(t, "result", 5*time.Minute).Result
	}
	return out
}

// checkConns counts the established data connections between each pair of
// hosts from both ends and wants exactly want; it logs every host's count.
func (c *cluster) checkConns(t *testing.T, want int) {
	t.Helper()
	cc, err := c.countConns()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, a := range c.net.Hosts {
		n := cc[a.Name]
		lines = append(lines, fmt.Sprintf("%s: data %d %v (agents' %v), control %d, within the host %d", a.Name, n.Data, n.DataTo, n.AgentTo, n.Control, n.Local))
		for _, b := range c.net.Hosts {
			if a == b {
				continue
			}
			if got := n.DataTo[b.Name]; got != want {
				t.Errorf("%s sees %d data connections with %s, want %d", a.Name, got, b.Name, want)
			}
			if c.agent && n.AgentTo[b.Name] != n.DataTo[b.Name] {
				t.Errorf("%s: %d of its data connections with %s bypass the agents", a.Name, n.DataTo[b.Name]-n.AgentTo[b.Name], b.Name)
			}
		}
	}
	t.Logf("established TCP connections (ss -tn in each host):\n%s", strings.Join(lines, "\n"))
}

// processKilled kills one process of host hi while every process moves
// bytes with every other: its peers' operations with it fail with a
// sentinel that says it is gone (never a wrong byte), everyone else's go on
// without an error, and afterwards the survivors work with each other.
func (c *cluster) processKilled(t *testing.T, round int) {
	victim := c.workers[nProcs+1] // h2p2
	ws := c.live()
	c.startRun(t, round, ws)
	victim.kill()
	t.Logf("killed %s (pid %d) mid-run", victim.id, victim.p.Pid())
	live := c.live()
	for _, w := range live {
		c.waitFailed(t, w, map[string]bool{victim.id: true})
	}
	for _, w := range live {
		w.send(t, command{Cmd: "stop"})
	}
	res := c.results(t, live)
	// In flight: the peer is gone (or its buffer released); a new queue
	// pair: the peer is unknown or unreachable.
	allowed := map[string]bool{"ErrPeerGone": true, "ErrReleased": true, "ErrClosed": true, "ErrUnknownPeer": true}
	for _, w := range live {
		for id, r := range res[w.id] {
			if r.Mismatch != 0 {
				t.Errorf("%s -> %s: %d wrong bytes: %s", w.id, id, r.Mismatch, r.Bad)
			}
			if id != victim.id {
				if len(r.Errs) != 0 || r.OK == 0 {
					t.Errorf("%s -> %s: %d ok, errors %v %v", w.id, id, r.OK, r.Errs, r.First)
				}
				continue
			}
			if len(r.Errs) == 0 {
				t.Errorf("%s -> %s (killed): no error in %d iterations", w.id, id, r.Iters)
			}
			for name := range r.Errs {
				if !allowed[name] {
					t.Errorf("%s -> %s (killed): %d × %s: %s", w.id, id, r.Errs[name], name, r.First[name])
				}
			}
			t.Logf("%s -> %s (killed): %d ok, then %v: %v", w.id, id, r.OK, r.Errs, sortedValues(r.First))
		}
	}
	// The survivors go on with each other.
	var only []string
	for _, w := range live {
		only = append(only, w.id)
	}
	res = c.round(t, command{Cmd: "run", Round: round + 1, Max: 2, Only: only}, live)
	for _, w := range live {
		for id, r := range res[w.id] {
			if r.OK != 2 || len(r.Errs) != 0 || r.Mismatch != 0 {
				t.Errorf("after the kill, %s -> %s: %d of 2 ok, errors %v %v, %d wrong: %s", w.id, id, r.OK, r.Errs, r.First, r.Mismatch, r.Bad)
			}
		}
	}
}

func sortedValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// TestAgent runs 3 hosts × 4 processes, each host with its agent: every
// process attached, traffic between hosts through the agents, shm within
// a host.
func TestAgent(t *testing.T) {
	if !agentBuilt {
		t.Skip("agent mode is not built in this tree")
	}
	c := newCluster(t, clusterOpts{hosts: nHosts, procs: nProcs, agent: true, slot: slot})
	t.Run("AllToAll", func(t *testing.T) { c.allToAll(t, 1, "agent") })
	t.Run("Connections", func(t *testing.T) { c.checkConns(t, agentConnsPerPair) })
	t.Run("AgentKilled", func(t *testing.T) { c.agentKilled(t, 10) })
	t.Run("ProcessKilled", func(t *testing.T) { c.processKilled(t, 20) })
	t.Run("Released", func(t *testing.T) { c.released(t) })
}
