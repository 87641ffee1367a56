package actor

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// Bounded by default. A manager whose Config leaves its caps at zero gets
// these, so that no sequence of requests, local or remote, can make it
// register more than a share of the machine's memory or map more regions
// than the kernel allows a process (each allocated region is one mapping;
// past vm.max_map_count the Go runtime itself can no longer map memory and
// the process dies):
//
//   - registered bytes: half of physical memory (DefaultRegisteredShare);
//   - one region: a quarter of physical memory;
//   - regions: 16384, or a quarter of vm.max_map_count if that is lower;
//   - bytes held by remote peers (RequestBuffer over the network): a
//     quarter of physical memory;
//   - buffers per remote peer: 1024;
//   - remote lease: buffers remote peers request without a lease get 10
//     minutes (they renew with RenewLease);
//   - routes: 4096; route handshakes accepted per peer: 64 per 30 s.
const (
	// DefaultRegisteredShare is the share of physical memory a manager
	// registers at most, in percent.
	DefaultRegisteredShare = 50
	// DefaultMaxRegions caps the regions of a manager.
	DefaultMaxRegions = 16384
	// DefaultMaxRemoteBuffersPerPeer caps the buffers one remote peer
	// holds.
	DefaultMaxRemoteBuffersPerPeer = 1024
	// DefaultRemoteLease is the lease of a buffer a remote peer requests
	// without one.
	DefaultRemoteLease = 10 * time.Minute
	// DefaultMaxRoutes caps the routes to peers.
	DefaultMaxRoutes = 4096
	// DefaultHandshakesPerPeer caps the route handshakes one peer has
	// accepted per handshakeWindow.
	DefaultHandshakesPerPeer = 64
	// DefaultRouteLinger is how long an idle route outlives its last queue
	// pair (Config.RouteLinger, serve --route-linger).
	DefaultRouteLinger = 30 * time.Second
	handshakeWindow    = 30 * time.Second
)

// DefaultLimits returns the default registry limits for this machine.
func DefaultLimits() buffer.Limits {
	mem := physicalMemory()
	regions := DefaultMaxRegions
	if n := maxMapCount(); n > 0 && n/4 < regions {
		regions = max(n/4, 64)
	}
	return buffer.Limits{MaxBytes: mib(mem / 100 * DefaultRegisteredShare), MaxRegions: regions, MaxRegion: mib(mem / 4)}
}

// mib rounds n down to whole MiB.
func mib(n uint64) uint64 { return n &^ (1<<20 - 1) }

// DefaultMaxRemoteBytes returns the default cap on bytes held by remote
// peers: a quarter of physical memory.
func DefaultMaxRemoteBytes() uint64 { return mib(physicalMemory() / 4) }

// maxMapCount reads vm.max_map_count (0 when unknown).
func maxMapCount() int {
	b, err := os.ReadFile("/proc/sys/vm/max_map_count")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return n
}
