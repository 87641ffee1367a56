//go:build linux

package agenthosts

// The line protocol between the test and its workers. The test writes one
// command a line (JSON) on a worker's stdin; the worker answers with
// "ready ADDR" once and then one event a line (JSON) on stdout.

// command is what the test asks of a worker.
type command struct {
	Cmd   string     // peers, run, stop, reset, stats, bench, quit
	Peers []peerInfo // peers: everyone, the worker itself included (skipped)
	Round int        // run: the round number (it seeds the bytes)
	Max   int        // run: iterations per peer at most (the loop's bound)
	Only  []string   // run: the peers to work with (empty: all)
	Bench *benchSpec // bench
}

// peerInfo names a worker and the buffer it exports.
type peerInfo struct {
	ID     string // h1p1 ...
	Index  int    // 0-based, over all workers: its slot in everyone's buffer
	Addr   string // actor system address
	Shared []byte // its shared buffer's handle (proto)
	Bench  []byte // its bench buffer's handle (proto; empty without one)
}

// event is what a worker says.
type event struct {
	Ev     string // hello, peers, started, warm, failed, result, stats, bench, fatal
	Peer   string // failed: the peer
	Hello  *peerInfo
	Data   string // hello: its TCP data listener
	Result map[string]*peerResult
	Stats  *workerStats
	Bench  *benchResult
	Err    string
}

// peerResult is one run's outcome with one peer.
type peerResult struct {
	Iters    int            // iterations begun
	OK       int            // iterations with all three operations checked out
	Errs     map[string]int // failed operations by sentinel name
	First    map[string]string
	Mismatch int    // operations that reported success with a wrong byte
	Bad      string // the first of them
	Kinds    map[string]int
}

// workerStats is a worker's own view of its cost.
type workerStats struct {
	Goroutines int
	RSSKiB     int64 // VmRSS
	HeapKiB    int64 // Go heap in use + stacks
}

// benchSpec asks for a timed loop against one peer's bench buffer.
type benchSpec struct {
	Peer  string
	Op    string // put or get
	Size  int
	Count int
	Conc  int
}

// benchResult is what the loop measured.
type benchResult struct {
	MiBs  float64
	P50us float64
	Errs  int
	First string
	Kind  string
}
