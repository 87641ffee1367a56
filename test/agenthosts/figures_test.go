//go:build linux

package agenthosts

import (
	"fmt"
	"os"
	"sort"
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
// latency: one process on h1 to one on h2, direct and through the agents.
func TestFigures(t *testing.T) {
	if os.Getenv("RDMAMGR_AGFIGURES") != "1" {
		t.Skip("a measurement: RDMAMGR_AGFIGURES=1 go test -count=1 -run Figures -v ./test/agenthosts")
	}
	modes := []bool{false}
	if agentBuilt {
		modes = append(modes, true)
	}
	t.Run("Cost", func(t *testing.T) {
		var b strings.Builder
		fmt.Fprintln(&b, "| mode | per host | data conns | control conns | RSS MiB | Go heap+stacks MiB | goroutines |")
		fmt.Fprintln(&b, "|---|---|---:|---:|---:|---:|---:|")
		var extra strings.Builder
		for _, agent := range modes {
			c := newCluster(t, clusterOpts{hosts: nHosts, procs: nProcs, agent: agent, slot: slot})
			before := c.hostCosts(t)
			c.crossRound(t, 1)
			after := c.hostCosts(t)
			name := modeName(agent)
			for _, h := range c.net.Hosts[:1] {
				a, z := before[h.Name], after[h.Name]
				fmt.Fprintf(&b, "| %s | idle, %d procs (h1) | %d | %d | %.1f | %.1f | %d |\n", name, nProcs, a.data, a.control, mib(a.rss), mib(a.heap), a.goroutines)
				fmt.Fprintf(&b, "| %s | all to all (h1) | %d | %d | %.1f | %.1f | %d |\n", name, z.data, z.control, mib(z.rss), mib(z.heap), z.goroutines)
			}
			// Growth per pair of processes on two hosts, from h1's view
			// (its processes' side of each pair), averaged over hosts.
			var d hostCost
			for _, h := range c.net.Hosts {
				d.add(after[h.Name].sub(before[h.Name]))
			}
			pairs := float64(nHosts * (nHosts - 1) * nProcs * nProcs)
			fmt.Fprintf(&extra, "%s: per host and pair of processes on two hosts: %.2f data conns, %.2f control conns, %.1f KiB RSS, %.1f KiB Go heap+stacks, %.2f goroutines; per process idle: %.1f MiB RSS, %d goroutines\n",
				name, float64(d.data)/pairs, float64(d.control)/pairs, float64(d.rss)/pairs, float64(d.heap)/pairs, float64(d.goroutines)/pairs,
				mib(before["h1"].rss)/nProcs, before["h1"].goroutines/nProcs)
		}
		t.Logf("3 hosts × 4 processes, every process with every process of the other hosts (%d iterations each):\n%s\n%s", iters, b.String(), extra.String())
	})
	t.Run("Throughput", func(t *testing.T) {
		c := newCluster(t, clusterOpts{hosts: 2, procs: 1, slot: slot, bench: 4 << 20})
		var b strings.Builder
		fmt.Fprintln(&b, "| size | op | direct MiB/s (median, range of 3) | p50 |")
		fmt.Fprintln(&b, "|---|---|---:|---:|")
		for _, r := range []struct{ size, count int }{{4 << 10, 4000}, {64 << 10, 1500}, {1 << 20, 150}} {
			for _, op := range []string{"put", "get"} {
				var mibs, p50 []float64
				for range 3 {
					res := c.benchOne(t, 0, 1, benchSpec{Op: op, Size: r.size, Count: r.count, Conc: 4})
					mibs, p50 = append(mibs, res.MiBs), append(p50, res.P50us)
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %.0f µs |\n", sizeName(r.size), op, medianRange(mibs), median(p50))
			}
		}
		var lat []float64
		for range 3 {
			lat = append(lat, c.benchOne(t, 0, 1, benchSpec{Op: "get", Size: 8, Count: 2000, Conc: 1}).P50us)
		}
		fmt.Fprintf(&b, "\n8-byte Get, one in flight, p50: direct %s µs\n", medianRange(lat))
		t.Logf("h1 -> h2, 4 in flight:\n%s", b.String())
	})
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

// hostCost is what one host's processes (and agent) hold.
type hostCost struct {
	data, control int
	rss, heap     int64 // KiB
	goroutines    int
}

func (a hostCost) sub(b hostCost) hostCost {
	return hostCost{a.data - b.data, a.control - b.control, a.rss - b.rss, a.heap - b.heap, a.goroutines - b.goroutines}
}

func (a *hostCost) add(b hostCost) {
	a.data += b.data
	a.control += b.control
	a.rss += b.rss
	a.heap += b.heap
	a.goroutines += b.goroutines
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
		out[h.Name] = hostCost{data: cc[h.Name].Data, control: cc[h.Name].Control}
	}
	for _, w := range c.live() {
		w.send(t, command{Cmd: "stats"})
		s := w.wait(t, "stats", 30*time.Second).Stats
		x := out[w.host.Name]
		x.rss += s.RSSKiB
		x.heap += s.HeapKiB
		x.goroutines += s.Goroutines
		out[w.host.Name] = x
	}
	for _, a := range c.agents {
		s := a.stats(t)
		x := out[a.host.Name]
		x.rss += s.RSSKiB
		x.heap += s.HeapKiB
		x.goroutines += s.Goroutines
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
