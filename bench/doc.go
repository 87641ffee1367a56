// Package bench measures Put and Get through rdmamgr: Run drives a number
// of operations of one size from a manager to a peer's buffer (or back)
// with some in flight at once, and reports the throughput, the latency of
// each operation that succeeded, and what failed. It is the engine of
// `rdmamgr bench` and the "ours" side of `rdmamgr bench --baseline`
// (package bench/baseline holds the plain-TCP side and the comparison).
//
// A Result counts only operations that succeeded; a run stops early when
// its context ends, when the peer is gone (rdmamgr.ErrPeerGone) or when more than
// Config.MaxErrors operations failed (ErrTooManyErrors), and says why in
// Result.Stop. The data path allocates nothing per operation: each worker
// reuses one work request on its own slot of the buffers. With
// Config.Ring one goroutine keeps the operations in flight with a ring of
// reusable work requests through a completion queue (ring.go: posted in
// chains, runs of a chain prepared once with PrepareOps or gathered with
// PostOps, reaped in batches with Wait), as a verbs program does
// (`rdmamgr bench --inflight N`). Config.Start, when set, runs between the
// warm-up and the timed phase (`rdmamgr bench --baseline --procs N` starts
// the timed phases of its N bench processes together with it).
//
// Each operation a worker posts and waits for is timed with LatencyClock
// (clock.go): the CPU's time-stamp counter where the kernel keeps time
// with it, as UCX and perftest time theirs, so the clock adds tens of
// nanoseconds, not time.Now's two vDSO reads (internal/cycles).
//
// stats.go has the figures both bench and bench/baseline print: MiB/s,
// operations per second, percentiles and microseconds.
//
// The scripts beside the package print the README's tables: repeat.sh
// (the median ratio of several `rdmamgr bench --baseline` runs), compare.sh
// (ours against plain TCP and UCX's tcp transport), samehost.sh with
// samehost-table.sh (ours against a single-thread memcpy and UCX's shared
// memory transports, on one host) and ucx.sh (ucx_perftest at our sizes, over
// any UCX_TLS; --outstanding N for the op rate) and oprate.sh (the op-rate
// tables: small operations with many in flight against a plain TCP stream,
// against UCX sm with as many outstanding, and N bench processes against N
// plain streams; repeated, median and range). scripts_test.go runs ucx.sh
// against a fake ucx_perftest, samehost-table.sh on a made-up run and
// oprate.sh against a fake rdmamgr, so their parsing is tested. instr.sh
// counts a Go benchmark's instructions per operation under valgrind's
// callgrind (the same on every run, where this VM's clock is not);
// instr_test.go runs it on a probe benchmark where valgrind is installed.
package bench
