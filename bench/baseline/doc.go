// Package baseline measures rdmamgr against plain Go TCP on the same
// machine, in the same run: what `rdmamgr bench --baseline` prints.
//
// The plain-TCP side is a Server (`rdmamgr baseline-server` runs one in its
// own process) and three clients that use nothing but Go's net package:
// Stream moves a stream of operations over some connections, PingPong
// times one request/response round trip at a time, and Pipeline keeps many
// requests in flight. Every exchange on a connection starts with a fixed
// 24-byte header from the client (protocol.go); the server treats every
// field as hostile and closes a connection that sends anything malformed.
//
// Run is the comparison: for every size and op it asks the caller's Ours
// for our figure (a bench.Run against a manager) and then measures the
// plain-TCP stream of the same operations over the same number of
// connections; then an 8-byte Get round trip against a TCP ping-pong, and
// 64-byte Puts with many in flight against a TCP request/response
// pipeline. Ratios are ours / plain TCP. Every row has ops/s beside MiB/s;
// with Config.Inflight the sizes up to SmallMax (4 KiB) run that many of
// ours in flight from one goroutine (bench.Config.Ring), the stream on as
// many slots. It prints a table as it goes and returns a Report (the JSON
// of --json).
//
// Against memcpy (Config.Against, `bench --baseline --against memcpy`, the
// default of `--backend shm`) the baseline of every row is Memcpy: one
// thread copying between two buffers of the same size, the same number of
// times, in this process; the latency line has ours alone and there is no
// pipeline. That is the bound of a same-host transfer. Config.WantBackend
// makes a run whose route is of another kind (a same-host bench that fell
// back to TCP) fail with ErrWrongBackend instead of measuring the wrong
// thing.
//
// Placement pins the bench process and the servers it starts to CPUs
// (any, same or split) through internal/proc; StartServer starts a server
// process pinned as placed.
package baseline
