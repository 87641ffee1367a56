// Package test holds rdmamgr's multi-process integration and fault tests.
//
// TestMain builds cmd/rdmamgr once; each test starts the `rdmamgr serve`
// daemons it needs as child processes (stopped with SIGTERM when the test
// ends: each must exit 0) and talks to them from the test process's own
// manager. The test process is one node and every other manager is a
// separate process, with one exception: a daemon receives no Send or
// PutWithImm (nothing subscribes), so TestAttackDataStalledSends starts
// its receiver as a second node in the test process, and closes it.
//
//   - TestMoveBothWays moves random-sized slices (1 B to 4 MiB) at random
//     offsets between the test process and 16 MiB buffers at two daemons,
//     both ways, one at a time and many in flight at once, verifying every
//     byte; meanwhile `rdmamgr bench --verify` processes load the same
//     daemons.
//   - TestHostile throws bad handles, forged and garbage data connections,
//     malformed frames, gRPC and actor-protocol junk, lifecycle messages
//     and unknown control messages at a daemon. Each case checks the error
//     sentinel, that the daemon's memory is unchanged and that the daemon
//     still serves puts, gets and status.
//   - TestPeerKilled takes a daemon away (SIGKILL, SIGTERM) while 4 MiB
//     transfers are in flight: operations fail with rdmamgr.ErrPeerGone (or
//     ErrDeadline) and none hangs; a new daemon then works.
//   - TestPeerStopped freezes a daemon (SIGSTOP) under short deadlines:
//     operations fail with rdmamgr.ErrDeadline, late answers do not touch
//     the memory of failed requests, and the daemon is usable once resumed.
//   - TestDetectHungPeer measures how long a frozen (SIGSTOP) or killed
//     daemon takes to be found dead (rdmamgr.ErrPeerGone) and checks a new
//     queue pair reaches it again.
//   - TestSoak runs workers doing random verified puts and gets against
//     several daemons while one is SIGKILLed and restarted at the same
//     address every few seconds; it reports operations, bytes, errors by
//     kind, corrupted bytes and wrong completions (both must be 0), and
//     goroutines and file descriptors before and after (no growth).
//     -soak.duration runs it longer (default 20 s, a kill every 3 s).
//   - TestSharedSecret and TestRemoteCap check --secret-file and
//     --max-remote across processes.
//   - TestAttackControlWithoutSecret (issue 24 row 6): a process without the
//     secret gets no buffer and no status from a --secret-file daemon, the
//     CLI says the daemon is sealed, a bench with the secret verifies, and a
//     daemon with neither secret nor TLS warns that it is open.
//   - TestAttackSHMSocketFlood (issue 24 row 3): a process of user nobody
//     (this test binary run again under that uid, attackerEnv) floods a
//     daemon's abstract shm socket; the daemon's fds stay bounded, verified
//     shm and TCP benches pass during the flood, refusals are logged once a
//     second.
//   - TestAttackSHMStoppedPeer (issue 24 row 5): a `rdmamgr bench` over shm
//     is SIGSTOPped mid-copy (its state table read through /proc/PID/mem);
//     its buffers' lease and another peer's take effect at once, with a
//     verified bench alongside. The row 4 attacks (a peer of the protocol's
//     own making) are backend/shm's TestAttackExportOnlyThatRegion.
//
// Every test checks that the test's manager holds no route and no memory
// afterwards; TestMain closes the manager after the tests and fails the run
// if any goroutine is left (go.uber.org/goleak). Child processes are
// started, awaited and stopped through internal/proc (daemon_test.go).
//
// The raw data-protocol helpers (helpers_test.go) speak backend/tcp's wire
// format by hand and must follow it when it changes.
//
// No test asserts how long anything took; timeouts only turn a hang into a
// failure. Run with -rdmamgr.logs to see the managers' logs.
//
// The tests run on Linux (they use Pdeathsig, SIGSTOP and SIGCONT). The
// package contains only tests; this file exists for its documentation.
package test
