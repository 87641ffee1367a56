package actor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// What remote peers may hold (MaxRemoteBytes, MaxRemoteBuffersPerPeer) and
// for how long (leases, and the reaper that ends them).

// remoteGrant is a region a remote peer requested.
type remoteGrant struct {
	peer  string
	bytes uint64
}

// allocate serves RequestBuffer. Remote requesters (peer != "") count
// against MaxRemoteBytes and MaxRemoteBuffersPerPeer and get RemoteLease
// when they ask for no lease.
func (m *Manager) allocate(msg *rdmapb.RequestBuffer, remote bool, peer string) (buffer.Buffer, error) {
	loc := buffer.Location(msg.Location)
	if !loc.Valid() {
		return buffer.Buffer{}, fmt.Errorf("memory location %d unknown: %w", msg.Location, rdmamgr.ErrInvalid)
	}
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
			return buffer.Buffer{}, fmt.Errorf("%d bytes for a peer with %d of %d in use (serve --max-remote): %w", msg.Size, total, m.cfg.MaxRemoteBytes, rdmamgr.ErrLimit)
		case m.remotePerPeer[peer] >= m.cfg.MaxRemoteBuffersPerPeer:
			n := m.remotePerPeer[peer]
			m.mu.Unlock()
			return buffer.Buffer{}, fmt.Errorf("peer %s holds %d buffers, the most allowed (serve --max-remote-buffers): %w", peer, n, rdmamgr.ErrLimit)
		}
		m.remoteTotal += msg.Size // reserved; undone below on failure
		m.remotePerPeer[peer]++
		m.mu.Unlock()
	}
	b, err := m.reg.AllocateAt(loc, msg.Size, buffer.Access(msg.Access))
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

// reaper releases buffers whose lease ran out, and queue pairs never
// claimed. Each expired buffer is released on a goroutine of its own, so
// one whose release waits (a peer's request stalled in it) delays no
// other's expiry.
func (m *Manager) reaper() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.ReapInterval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // at stop: releases still waiting give up (the regions are freed once drained)
	var mu sync.Mutex
	reaping := make(map[uint64]bool) // regions being released
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.dropUnclaimed(time.Now().Add(-2 * m.cfg.RequestTimeout))
		for _, r := range m.reg.Expired() {
			mu.Lock()
			busy := reaping[r.ID()]
			reaping[r.ID()] = true
			mu.Unlock()
			if busy {
				continue
			}
			m.wg.Add(1) // the reaper's own count keeps the group open
			go func() {
				defer m.wg.Done()
				rctx, rcancel := context.WithTimeout(ctx, m.cfg.OpTimeout)
				err := m.reg.Release(rctx, m.reg.Handle(r))
				rcancel()
				m.forgetRemote(r.ID())
				m.log.Info("lease expired: buffer released", "region", r.ID(), "err", err)
				mu.Lock()
				delete(reaping, r.ID())
				mu.Unlock()
			}()
		}
	}
}
