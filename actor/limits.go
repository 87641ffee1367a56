package actor

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// Bounded by default. A manager whose Config leaves its caps at zero gets
// these, so that no sequence of requests, local or remote, can make it
// register more than a share of the machine's memory or map more regions
// than the kernel allows a process (each allocated region is one mapping;
// past vm.max_map_count the Go runtime itself can no longer map memory and
// the process dies):
//
//   - registered bytes: half of physical memory;
//   - one region: a quarter of physical memory;
//   - regions: 16384, or a quarter of vm.max_map_count, or half the
//     process's limit on open files (RLIMIT_NOFILE: a manager that runs
//     shm gives each buffer a memfd of its own), if either is lower;
//   - bytes held by remote peers (RequestBuffer over the network): a
//     quarter of physical memory;
//   - buffers per remote peer: 1024;
//   - remote lease: buffers remote peers request without a lease get 10
//     minutes (they renew with RenewLease);
//   - routes: 4096; route handshakes accepted per peer: 64 per 30 s.
//
// DefaultConfig holds them all.
const (
	registeredShare = 50    // percent of physical memory
	maxRegions      = 16384 // before vm.max_map_count's share
	handshakeWindow = 30 * time.Second
)

// mib rounds n down to whole MiB.
func mib(n uint64) uint64 { return n &^ (1<<20 - 1) }

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
