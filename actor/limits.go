package actor

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
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
	handshakeWindow          = 30 * time.Second
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

// remoteGrant is a region a remote peer requested.
type remoteGrant struct {
	peer  string
	bytes uint64
}

// allocate serves RequestBuffer. Remote requesters (peer != "") count
// against MaxRemoteBytes and MaxRemoteBuffersPerPeer and get RemoteLease
// when they ask for no lease.
func (m *Manager) allocate(msg *rdmapb.RequestBuffer, remote bool, peer string) (buffer.Buffer, error) {
	lease := time.Duration(msg.LeaseMs) * time.Millisecond
	if msg.LeaseMs > uint64(m.cfg.MaxLease/time.Millisecond) {
		lease = m.cfg.MaxLease
	}
	if remote && lease == 0 {
		lease = m.cfg.RemoteLease
	}
	if remote {
		m.mu.Lock()
		switch {
		case msg.Size > m.cfg.MaxRemoteBytes || m.remoteTotal > m.cfg.MaxRemoteBytes-msg.Size:
			total := m.remoteTotal
			m.mu.Unlock()
			return buffer.Buffer{}, fmt.Errorf("%d bytes for a peer with %d of %d in use: %w", msg.Size, total, m.cfg.MaxRemoteBytes, buffer.ErrExhausted)
		case m.remotePerPeer[peer] >= m.cfg.MaxRemoteBuffersPerPeer:
			n := m.remotePerPeer[peer]
			m.mu.Unlock()
			return buffer.Buffer{}, fmt.Errorf("peer %s holds %d buffers: %w", peer, n, buffer.ErrExhausted)
		}
		m.remoteTotal += msg.Size // reserved; undone below on failure
		m.remotePerPeer[peer]++
		m.mu.Unlock()
	}
	b, err := m.reg.Allocate(msg.Size, buffer.Access(msg.Access))
	if err == nil && lease > 0 {
		if err = m.reg.SetLease(b, lease); err != nil {
			_ = m.reg.Release(context.Background(), b)
		}
		b.Lease = lease
	}
	if remote {
		m.mu.Lock()
		if err != nil {
			m.remoteTotal -= msg.Size
			m.dropPeerLocked(peer)
		} else {
			m.remoteBytes[b.Region] = remoteGrant{peer: peer, bytes: msg.Size}
		}
		m.mu.Unlock()
	}
	return b, err
}

func (m *Manager) dropPeerLocked(peer string) {
	if m.remotePerPeer[peer]--; m.remotePerPeer[peer] <= 0 {
		delete(m.remotePerPeer, peer)
	}
}

// forgetRemote drops a released region from the remote counts.
func (m *Manager) forgetRemote(region uint64) {
	m.mu.Lock()
	if g, ok := m.remoteBytes[region]; ok {
		delete(m.remoteBytes, region)
		m.remoteTotal -= g.bytes
		m.dropPeerLocked(g.peer)
	}
	m.mu.Unlock()
}

// handshakeAllowed counts a route handshake from peer and reports whether
// it is within DefaultHandshakesPerPeer per handshakeWindow. The table is
// bounded: windows that ended are dropped when it grows.
func (m *Manager) handshakeAllowed(peer string) bool {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.handshakes[peer]
	if !ok || now.Sub(w.start) >= handshakeWindow {
		if len(m.handshakes) >= maxNonces {
			for k, v := range m.handshakes {
				if now.Sub(v.start) >= handshakeWindow {
					delete(m.handshakes, k)
				}
			}
			if len(m.handshakes) >= maxNonces {
				return false
			}
		}
		w = handshakeCount{start: now}
	}
	w.n++
	m.handshakes[peer] = w
	return w.n <= m.cfg.HandshakesPerPeer
}

type handshakeCount struct {
	start time.Time
	n     int
}
