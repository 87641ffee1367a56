// Package agenthosts runs many processes per host on namespaced hosts
// (test/netns), with and without host agents (issue 26): 3 hosts × 4
// processes, each process a node of its own (this test binary run again
// inside a host: a worker, worker_test.go), every process Putting to and
// Getting from every other with every byte checked.
//
//   - TestDirect: no agent, every process its own routes (today's shape).
//     All to all, every byte checked, each pair's route kind (shm within a
//     host, TCP between hosts); the data connections between each pair of
//     hosts counted with `ss -tn` inside each host: 2 × P² routes × 2
//     connections; a process killed mid-run: its peers' operations with it
//     end with ErrPeerGone, ErrReleased or ErrClosed (never a wrong byte),
//     everyone else's go on without an error, and the survivors work on.
//   - TestAgent: the same with an agent per host (`rdmamgr serve
//     --agent-socket`, --agent-routes 4) and every process attached: the
//     routes between hosts are the agents' (kind "agent"), the data
//     connections between two hosts are the agents' alone: exactly N = 4
//     (a route of N/2 each way); h2's agent killed mid-run: operations between h2 and the
//     other hosts end with a sentinel (never a wrong byte), h1 with h3 and
//     shm within each host go on without an error; restarted, every pair
//     works through the agents again with no process restarted; a process
//     killed mid-run as in TestDirect; the agents hold proxies of live
//     processes' regions only (none of the killed one's), and none once
//     every process has quit (`rdmamgr status` of each agent).
//   - TestFigures (RDMAMGR_AGFIGURES=1): the README's figures, direct
//     against agents: connections, RSS, Go heap and goroutines per host;
//     throughput and CPU per operation at 4 KiB, 64 KiB and 1 MiB; an
//     8-byte Get's latency.
//
// Under -race the workers (this binary) and the agents (built with -race
// for the run) both run with the race detector.
//
// The tests skip where namespaces cannot be made, saying why, unless
// RDMAMGR_REQUIRE_NETNS=1 (set by .ci/run). Every loop is bounded by a
// count and every wait by a time; namespaces (and what runs in them) are
// removed when a test ends, pass or fail.
package agenthosts
