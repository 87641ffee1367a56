//go:build linux

package agenthosts

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFigures prints the README's agent figures (issue 26 must-have 6): a
// measurement, run on request (as root, without -race):
//
//	RDMAMGR_AGFIGURES=1 go test -count=1 -run Figures -v ./test/agenthosts
//
// Cost: 3 hosts × 4 processes, every process moving bytes with every
// process of the other hosts; per host, the established TCP connections
// (data, control), the RSS, Go heap and goroutines of its processes (and
// its agent), before and after; the growth per pair of processes on two
// hosts extrapolates to 100 hosts × 8 and × 64 processes. Throughput and
// latency: one process on h1 to one on h2, direct and through the agents,
// with the CPU time per operation of every process of the run (the
// figure a loaded machine does not skew). RDMAMGR_AGPROFILE=DIR writes
// every worker's and agent's CPU profile into DIR.
func TestFigures(t *testing.T) {
	if os.Getenv("RDMAMGR_AGFIGURES") != "1" {
		t.Skip("a measurement: RDMAMGR_AGFIGURES=1 go test -count=1 -run Figures -v ./test/agenthosts")
	}
	modes := []bool{false}
	if agentBuilt {
		modes = append(modes, true)
	}
	t.Run("Cost", func(t *testing.T) {
		var models []costModel
		var b strings.Builder
		fmt.Fprintln(&b, "| mode | h1, measured | data conns | control conns | RSS MiB | Go heap+stacks MiB | goroutines |")
		fmt.Fprintln(&b, "|---|---|---:|---:|---:|---:|---:|")
		for _, agent := range modes {
			c := newCluster(t, clusterOpts{hosts: nHosts, procs: nProcs, agent: agent, slot: slot})
			before := c.hostCosts(t)
			c.crossRound(t, 1)
			after := c.hostCosts(t)
			m := modelOf(modeName(agent), before, after)
			models = append(models, m)
			for _, row := range []struct {
				what string
				h    hostCost
			}{{"idle", before["h1"]}, {"all to all", after["h1"]}} {
				x := row.h.total()
				fmt.Fprintf(&b, "| %s | %s | %d | %d | %.1f | %.1f | %d |\n", m.name, row.what, x.data, x.control, mib(x.rss), mib(x.heap), x.goroutines)
			}
		}
		t.Logf("3 hosts × 4 processes, every process with every process of the other hosts (%d iterations each):\n%s\n%s",
			iters, b.String(), extrapolate(models))
	})
	t.Run("Throughput", func(t *testing.T) {
		// One process on h1 and one on h2 per mode, both modes on the
		// same hosts' kind of net at once, runs alternating.
		var cs []*cluster
		for _, agent := range modes {
			cs = append(cs, newCluster(t, clusterOpts{hosts: 2, procs: 1, agent: agent, slot: slot, bench: 4 << 20}))
		}
		var b strings.Builder
		fmt.Fprint(&b, "| size | op |")
		for _, agent := range modes {
			fmt.Fprintf(&b, " %s MiB/s | p50 | CPU/op |", modeName(agent))
		}
		if len(modes) == 2 {
			fmt.Fprint(&b, " agent / direct |")
		}
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "|---|---|"+strings.Repeat("---:|---:|---:|", len(modes))+strings.Repeat("---:|", len(modes)-1))
		for _, r := range []struct{ size, count int }{{4 << 10, 4000}, {64 << 10, 1500}, {1 << 20, 150}} {
			for _, op := range []string{"put", "get"} {
				mibs, p50, cpu := make([][]float64, len(cs)), make([][]float64, len(cs)), make([][]float64, len(cs))
				for range 3 {
					for i, c := range cs {
						t0 := c.cpuTime()
						res := c.benchOne(t, 0, 1, benchSpec{Op: op, Size: r.size, Count: r.count, Conc: 4})
						mibs[i], p50[i] = append(mibs[i], res.MiBs), append(p50[i], res.P50us)
						cpu[i] = append(cpu[i], float64((c.cpuTime()-t0).Microseconds())/float64(r.count))
					}
				}
				fmt.Fprintf(&b, "| %s | %s |", sizeName(r.size), op)
				for i := range cs {
					fmt.Fprintf(&b, " %s | %.0f µs | %.0f µs |", medianRange(mibs[i]), median(p50[i]), median(cpu[i]))
				}
				if len(cs) == 2 {
					fmt.Fprintf(&b, " %.2f |", median(mibs[1])/median(mibs[0]))
				}
				fmt.Fprintln(&b)
			}
		}
		lat := make([][]float64, len(cs))
		for range 3 {
			for i, c := range cs {
				lat[i] = append(lat[i], c.benchOne(t, 0, 1, benchSpec{Op: "get", Size: 8, Count: 2000, Conc: 1}).P50us)
			}
		}
		fmt.Fprintf(&b, "\n8-byte Get, one in flight, p50 in µs (median, range of 3):")
		for i, agent := range modes {
			fmt.Fprintf(&b, " %s %s;", modeName(agent), medianRange(lat[i]))
		}
		if len(cs) == 2 {
			fmt.Fprintf(&b, " the agents add %.1f µs", median(lat[1])-median(lat[0]))
		}
		t.Logf("h1 -> h2, one process each, 4 in flight (median and range of 3 runs, alternating; CPU/op: user+system time of every process of the run, workers and agents, per operation):\n%s", b.String())
	})
}

// cpuTime is the CPU time (user and system, all threads) the cluster's
// live workers and agents have used so far.
func (c *cluster) cpuTime() time.Duration {
	var d time.Duration
	for _, w := range c.live() {
		d += cpuOf(w.p.Pid())
	}
	for _, a := range c.agents {
		d += cpuOf(a.p.Pid())
	}
	return d
}

// cpuOf reads utime+stime of pid from /proc/PID/stat (clock ticks of
// 10 ms: USER_HZ is 100 on Linux).
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may hold spaces: fields
	// count from after its closing parenthesis (state is field 3).
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

func modeName(agent bool) string {
	if agent {
		return "agent"
	}
	return "direct"
}

// crossRound runs a checked round in which every worker moves bytes with
// every worker of the other hosts.
func (c *cluster) crossRound(t *testing.T, round int) {
	t.Helper()
	for _, w := range c.workers {
		var only []string
		for _, o := range c.workers {
			if o.host != w.host {
				only = append(only, o.id)
			}
		}
		w.send(t, command{Cmd: "run", Round: round, Max: iters, Only: only})
	}
	for id, rs := range c.results(t, c.workers) {
		for peer, r := range rs {
			if r.OK != iters || len(r.Errs) != 0 || r.Mismatch != 0 {
				t.Fatalf("%s -> %s: %d of %d ok, errors %v %v, %d wrong: %s", id, peer, r.OK, iters, r.Errs, r.First, r.Mismatch, r.Bad)
			}
		}
	}
}

// cost is what some processes hold.
type cost struct {
	data, control int
	rss, heap     int64 // KiB
	goroutines    int
}

func (a cost) sub(b cost) cost {
	return cost{a.data - b.data, a.control - b.control, a.rss - b.rss, a.heap - b.heap, a.goroutines - b.goroutines}
}

func (a cost) plus(b cost) cost {
	return cost{a.data + b.data, a.control + b.control, a.rss + b.rss, a.heap + b.heap, a.goroutines + b.goroutines}
}

// scale returns a times f (a per-unit cost times a count).
func (a costF) scale(f float64) costF {
	return costF{a.data * f, a.control * f, a.rss * f, a.heap * f, a.goroutines * f}
}

func (a costF) plus(b costF) costF {
	return costF{a.data + b.data, a.control + b.control, a.rss + b.rss, a.heap + b.heap, a.goroutines + b.goroutines}
}

// costF is a cost per unit (fractions).
type costF struct{ data, control, rss, heap, goroutines float64 }

func (a cost) per(n float64) costF {
	return costF{float64(a.data) / n, float64(a.control) / n, float64(a.rss) / n, float64(a.heap) / n, float64(a.goroutines) / n}
}

// hostCost is what one host holds: its processes' part and its agent's
// (connections with an agent at one end are the agent's).
type hostCost struct{ procs, agent cost }

func (h hostCost) total() cost { return h.procs.plus(h.agent) }

// costModel is a host's cost as measured on 3 × 4, split so it
// extrapolates: every process's idle cost, the agent's idle cost, the
// processes' growth per pair of processes on two hosts, the agent's growth
// per other host.
type costModel struct {
	name                                     string
	procIdle, agentIdle, procPair, agentPair costF
}

func modelOf(name string, before, after map[string]hostCost) costModel {
	var b, a hostCost
	for h := range before {
		b.procs, b.agent = b.procs.plus(before[h].procs), b.agent.plus(before[h].agent)
		a.procs, a.agent = a.procs.plus(after[h].procs), a.agent.plus(after[h].agent)
	}
	return costModel{name: name,
		procIdle:  b.procs.per(nHosts * nProcs),
		agentIdle: b.agent.per(nHosts),
		procPair:  a.procs.sub(b.procs).per(nHosts * (nHosts - 1) * nProcs * nProcs),
		agentPair: a.agent.sub(b.agent).per(nHosts * (nHosts - 1)),
	}
}

// at is the model's cost of one host of H hosts × P processes, all to all.
func (m costModel) at(H, P int) costF {
	return m.procIdle.scale(float64(P)).plus(m.agentIdle).
		plus(m.procPair.scale(float64((H - 1) * P * P))).plus(m.agentPair.scale(float64(H - 1)))
}

// extrapolate prints the models and their costs per host at 3 × 4, 100 × 8
// and 100 × 64.
func extrapolate(ms []costModel) string {
	var b strings.Builder
	fmt.Fprintln(&b, "Per host: P × idle process + idle agent + (H−1) × P² × per process pair + (H−1) × per other host (agent), with:")
	for _, m := range ms {
		fmt.Fprintf(&b, "- %s: idle process %.1f MiB RSS, %.0f goroutines; idle agent %.1f MiB, %.0f goroutines; per process pair %.2f data + %.2f control conns, %.0f KiB RSS (%.0f KiB Go heap+stacks), %.1f goroutines; per other host (agent) %.2f data + %.2f control conns, %.0f KiB RSS (%.0f KiB Go heap), %.1f goroutines\n",
			m.name, m.procIdle.rss/1024, m.procIdle.goroutines, m.agentIdle.rss/1024, m.agentIdle.goroutines,
			m.procPair.data, m.procPair.control, m.procPair.rss, m.procPair.heap, m.procPair.goroutines,
			m.agentPair.data, m.agentPair.control, m.agentPair.rss, m.agentPair.heap, m.agentPair.goroutines)
	}
	fmt.Fprintln(&b, "\n| per host | mode | TCP conns (data + control) | RSS | goroutines |")
	fmt.Fprintln(&b, "|---|---|---:|---:|---:|")
	for _, hp := range [][2]int{{3, 4}, {100, 8}, {100, 64}} {
		for _, m := range ms {
			x := m.at(hp[0], hp[1])
			fmt.Fprintf(&b, "| %d × %d | %s | %.0f (%.0f + %.0f) | %s | %.0f |\n", hp[0], hp[1], m.name,
				x.data+x.control, x.data, x.control, kibName(x.rss), x.goroutines)
		}
	}
	return b.String()
}

func kibName(kib float64) string {
	if kib >= 1<<20 {
		return fmt.Sprintf("%.1f GiB", kib/(1<<20))
	}
	return fmt.Sprintf("%.0f MiB", kib/1024)
}

// hostCosts measures every host: connections with ss, the workers' own
// stats and the agent's.
func (c *cluster) hostCosts(t *testing.T) map[string]hostCost {
	t.Helper()
	time.Sleep(500 * time.Millisecond) // let connections and goroutines settle
	cc, err := c.countConns()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]hostCost{}
	for _, h := range c.net.Hosts {
		n := cc[h.Name]
		out[h.Name] = hostCost{procs: cost{data: n.Data - n.AgentData, control: n.Control - n.AgentCtl},
			agent: cost{data: n.AgentData, control: n.AgentCtl}}
	}
	for _, w := range c.live() {
		w.send(t, command{Cmd: "stats"})
		s := w.wait(t, "stats", 30*time.Second).Stats
		x := out[w.host.Name]
		x.procs = x.procs.plus(cost{rss: s.RSSKiB, heap: s.HeapKiB, goroutines: s.Goroutines})
		out[w.host.Name] = x
	}
	for _, a := range c.agents {
		s := a.stats(t)
		x := out[a.host.Name]
		x.agent = x.agent.plus(cost{rss: s.RSSKiB, heap: s.HeapKiB, goroutines: s.Goroutines})
		out[a.host.Name] = x
	}
	return out
}

// benchOne runs s from worker i to worker j.
func (c *cluster) benchOne(t *testing.T, i, j int, s benchSpec) *benchResult {
	t.Helper()
	s.Peer = c.workers[j].id
	c.workers[i].send(t, command{Cmd: "bench", Bench: &s})
	r := c.workers[i].wait(t, "bench", 5*time.Minute).Bench
	if r.Errs != 0 {
		t.Fatalf("bench %+v: %d errors: %s", s, r.Errs, r.First)
	}
	return r
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func medianRange(v []float64) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return fmt.Sprintf("%.1f (%.1f–%.1f)", s[len(s)/2], s[0], s[len(s)-1])
}
