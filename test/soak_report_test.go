//go:build linux

// TestSoak's report: the figures of a run, merged from the shared state and
// what each worker saw per daemon incarnation, printed, and checked.

package test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/internal/leakcheck"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// soakReport holds the figures of a run.
type soakReport struct {
	elapsed                  time.Duration
	ops, puts, gets, batches uint64
	bytes, putB, getB        uint64
	errs                     map[string]map[string]int
	nerrs                    uint64
	corrupted, corruptOps    uint64
	corruptSamples           []string
	wrong                    uint64
	wrongSamples             []string
	kills, restarts          uint64
	incarnations, reached    int
	reachedAfterRestart      int
	unreached                []string
	routes, reestablished    int
	routesBy                 []string
	gBefore, gAfter          int
	fdBefore, fdAfter        int
	restartRetries           int
	// reconnect: for each restarted incarnation that served the workers,
	// from its ready line to the first operation that succeeded on it.
	reconnect []time.Duration
	ctlFailed []time.Duration
}

func (s *soakRun) report(workers []*soakWorker, elapsed time.Duration) *soakReport {
	rep := &soakReport{
		elapsed: elapsed,
		ops:     s.ops.Load(), puts: s.puts.Load(), gets: s.gets.Load(), batches: s.batches.Load(),
		bytes: s.bytes.Load(), putB: s.putB.Load(), getB: s.getB.Load(),
		nerrs: s.nerrs.Load(), corrupted: s.corrupted.Load(), corruptOps: s.corruptOps.Load(),
		wrong: s.nwrong.Load(), kills: s.kills.Load(), restarts: s.restarts.Load(),
	}
	s.mu.Lock()
	rep.errs = s.errs
	rep.wrongSamples = slices.Clone(s.wrong)
	rep.corruptSamples = slices.Clone(s.corrupts)
	rep.ctlFailed = slices.Clone(s.ctlFailed)
	s.mu.Unlock()

	peers, routes := mergeSeen(workers, len(s.slots))
	for si, sl := range s.slots {
		rep.addDaemon(si, sl, peers, routes[si])
	}
	return rep
}

// mergeSeen merges what the workers saw: the incarnations they moved data
// with, by manager id (one per incarnation), and the routes their queue
// pairs used, by daemon.
func mergeSeen(workers []*soakWorker, daemons int) (map[uint64]*peerSeen, []map[queuepair.Route]bool) {
	peers := make(map[uint64]*peerSeen)
	routes := make([]map[queuepair.Route]bool, daemons)
	for i := range routes {
		routes[i] = make(map[queuepair.Route]bool)
	}
	for _, w := range workers {
		for id, p := range w.peers {
			q := peers[id]
			if q == nil {
				q = &peerSeen{slot: p.slot, firstPost: p.firstPost}
				peers[id] = q
			}
			if p.firstPost.Before(q.firstPost) {
				q.firstPost = p.firstPost
			}
			q.ops += p.ops
		}
		for r, si := range w.routes {
			routes[si][r] = true
		}
	}
	return peers, routes
}

// addDaemon adds the figures of the daemon in slot si: its routes, its
// incarnations and which of them the workers reached.
func (rep *soakReport) addDaemon(si int, sl *fixedDaemon, peers map[uint64]*peerSeen, routes map[queuepair.Route]bool) {
	rep.routes += len(routes)
	rep.reestablished += max(len(routes)-1, 0)
	incs := sl.incarnations()
	rep.incarnations += len(incs)
	rep.restartRetries += sl.portRetries()
	ops, first := opsByIncarnation(si, incs, peers)
	var parts []string
	for k, inc := range incs {
		if ops[k] > 0 {
			rep.reached++
			if k > 0 {
				rep.reachedAfterRestart++
				rep.reconnect = append(rep.reconnect, max(first[k].Sub(inc.ready), 0))
			}
		}
		end := inc.killed
		if end.IsZero() {
			end = time.Now()
		}
		life := end.Sub(inc.ready)
		if k > 0 && ops[k] == 0 && life >= soakReachedLife && !inc.killed.IsZero() {
			rep.unreached = append(rep.unreached, fmt.Sprintf("%s incarnation %d lived %v after its restart and served no operation",
				sl.name, k+1, life.Round(time.Millisecond)))
		}
		parts = append(parts, fmt.Sprintf("%d", ops[k]))
	}
	rep.routesBy = append(rep.routesBy, fmt.Sprintf("%s: %d routes, ops per incarnation [%s]", sl.name, len(routes), strings.Join(parts, " ")))
}

// opsByIncarnation returns, for each incarnation of the daemon in slot si,
// the successful operations it served and when the first of them was
// posted.
func opsByIncarnation(si int, incs []incarnation, peers map[uint64]*peerSeen) ([]int, []time.Time) {
	ops := make([]int, len(incs))
	first := make([]time.Time, len(incs))
	for _, p := range peers {
		if p.slot != si {
			continue
		}
		// An operation that succeeded was posted while its
		// incarnation lived: that is the one it served.
		for k, inc := range incs {
			if !p.firstPost.Before(inc.spawned) && (inc.killed.IsZero() || p.firstPost.Before(inc.killed)) {
				ops[k] += p.ops
				if first[k].IsZero() || p.firstPost.Before(first[k]) {
					first[k] = p.firstPost
				}
				break
			}
		}
	}
	return ops, first
}

func (r *soakReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak report after %v\n", r.elapsed.Round(time.Millisecond))
	fmt.Fprintf(&b, "  operations:        %d (%d puts, %d gets, each get's bytes compared; %d batches of 2..%d in flight)\n",
		r.ops, r.puts, r.gets, r.batches, soakMaxBatch)
	fmt.Fprintf(&b, "  bytes moved:       %.3f GiB (put %.3f GiB, got %.3f GiB), %.1f MiB/s\n",
		gib(r.bytes), gib(r.putB), gib(r.getB), float64(r.bytes)/(1<<20)/r.elapsed.Seconds())
	fmt.Fprintf(&b, "  errors (allowed):  %d\n", r.nerrs)
	kinds := make([]string, 0, len(r.errs))
	for k := range r.errs {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		stages := make([]string, 0, len(r.errs[k]))
		total := 0
		for st, n := range r.errs[k] {
			stages = append(stages, fmt.Sprintf("%s %d", st, n))
			total += n
		}
		sort.Strings(stages)
		fmt.Fprintf(&b, "    %-22s %d (%s)\n", k, total, strings.Join(stages, ", "))
	}
	if n := len(r.ctlFailed); n > 0 {
		slices.Sort(r.ctlFailed)
		fmt.Fprintf(&b, "    failed control requests took: min %v, median %v, max %v\n",
			r.ctlFailed[0].Round(time.Millisecond), r.ctlFailed[n/2].Round(time.Millisecond), r.ctlFailed[n-1].Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "  corrupted bytes:   %d (in %d operations)\n", r.corrupted, r.corruptOps)
	for _, c := range r.corruptSamples {
		fmt.Fprintf(&b, "    %s\n", c)
	}
	fmt.Fprintf(&b, "  wrong completions: %d\n", r.wrong)
	for _, w := range r.wrongSamples {
		fmt.Fprintf(&b, "    %s\n", w)
	}
	fmt.Fprintf(&b, "  kills: %d, restarts: %d (port busy, retried: %d)\n", r.kills, r.restarts, r.restartRetries)
	fmt.Fprintf(&b, "  incarnations reached by the workers: %d of %d (%d of them restarted ones)\n", r.reached, r.incarnations, r.reachedAfterRestart)
	if n := len(r.reconnect); n > 0 {
		slices.Sort(r.reconnect)
		fmt.Fprintf(&b, "  restart to first successful operation: min %v, median %v, max %v\n",
			r.reconnect[0].Round(time.Millisecond), r.reconnect[n/2].Round(time.Millisecond), r.reconnect[n-1].Round(time.Millisecond))
	}
	fmt.Fprintf(&b, "  routes set up by the workers' queue pairs: %d (%d re-established to a daemon at the same address)\n", r.routes, r.reestablished)
	for _, s := range r.routesBy {
		fmt.Fprintf(&b, "    %s\n", s)
	}
	fmt.Fprintf(&b, "  goroutines: %d before, %d after; file descriptors: %d before, %d after\n", r.gBefore, r.gAfter, r.fdBefore, r.fdAfter)
	return b.String()
}

func gib(n uint64) float64 { return float64(n) / (1 << 30) }

// check fails the test on what the report shows: no operation, corrupted
// bytes, wrong completions, a restarted daemon not reached again, or
// goroutines or file descriptors that grew beyond the slack since before.
func (rep *soakReport) check(t *testing.T, before soakCounts) {
	t.Helper()
	if rep.ops == 0 {
		t.Errorf("no operation succeeded")
	}
	if rep.corrupted != 0 {
		t.Errorf("%d corrupted bytes in %d operations that succeeded", rep.corrupted, rep.corruptOps)
	}
	if rep.wrong != 0 {
		t.Errorf("%d wrong completions; the first ones:\n  %s", rep.wrong, strings.Join(rep.wrongSamples, "\n  "))
	}
	for _, m := range rep.unreached {
		t.Errorf("restarted daemon not reached again: %s", m)
	}
	if rep.restarts > 0 && rep.reachedAfterRestart == 0 {
		t.Errorf("%d restarts, and no operation succeeded on a restarted daemon", rep.restarts)
	}
	if rep.gAfter > rep.gBefore+soakSlackGoroutines {
		t.Errorf("goroutines grew from %d to %d (slack %d); the groups that grew:\n%s", rep.gBefore, rep.gAfter, soakSlackGoroutines, leakcheck.Take().Growth(before.groups))
	}
	if rep.fdAfter > rep.fdBefore+soakSlackFDs {
		t.Errorf("file descriptors grew from %d to %d (slack %d): before\n%s\nafter\n%s", rep.fdBefore, rep.fdAfter, soakSlackFDs, before.fds, fdSummary())
	}
}
