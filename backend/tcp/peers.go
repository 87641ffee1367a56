package tcp

import (
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
)

// peerCounters count what the server did for one peer manager, across its
// data connections.
type peerCounters struct {
	ops, bytesIn, bytesOut, rejected atomic.Uint64
	// conns and idleSince are guarded by Backend.mu.
	conns     int
	idleSince time.Time
}

// maxPeerCounters bounds the peers remembered; past it, those without a
// connection the longest are forgotten.
const maxPeerCounters = 4096

var _ backend.PeerServer = (*Backend)(nil)

// peerJoin counts a served connection of peer in and returns its counters.
func (b *Backend) peerJoin(peer uint64) *peerCounters {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.peers == nil {
		b.peers = make(map[uint64]*peerCounters)
	}
	p := b.peers[peer]
	if p == nil {
		if len(b.peers) >= maxPeerCounters {
			b.forgetIdlePeerLocked()
		}
		p = &peerCounters{}
		b.peers[peer] = p
	}
	p.conns++
	return p
}

// peerLeave counts a served connection out.
func (b *Backend) peerLeave(p *peerCounters) {
	b.mu.Lock()
	p.conns--
	if p.conns == 0 {
		p.idleSince = time.Now()
	}
	b.mu.Unlock()
}

// forgetIdlePeerLocked drops the peer idle the longest, if any.
func (b *Backend) forgetIdlePeerLocked() {
	var oldest uint64
	var found bool
	for id, p := range b.peers {
		if p.conns == 0 && (!found || p.idleSince.Before(b.peers[oldest].idleSince)) {
			oldest, found = id, true
		}
	}
	if found {
		delete(b.peers, oldest)
	}
}

// ServedByPeer implements backend.PeerServer.
func (b *Backend) ServedByPeer() map[uint64]backend.PeerServedStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[uint64]backend.PeerServedStats, len(b.peers))
	for id, p := range b.peers {
		out[id] = backend.PeerServedStats{Ops: p.ops.Load(), BytesIn: p.bytesIn.Load(), BytesOut: p.bytesOut.Load(),
			Rejected: p.rejected.Load(), Conns: p.conns}
	}
	return out
}

// servedTally is what a served connection counted since it last
// published (publishServed): its serve goroutine's alone, so the
// backend's and the peer's counters, which every connection adds to, take
// an atomic add per batch of answers rather than per frame.
type servedTally struct{ ops, in, out uint64 }

// servedIn counts n bytes of a WRITE served, and the operation once, at
// its first frame: served ops are operations, not chunks.
func (s *serverConn) servedIn(n uint64, first bool) {
	if first {
		s.tally.ops++
	}
	s.tally.in += n
}

// servedOut counts n bytes of a READ served, and the operation at its
// first frame.
func (s *serverConn) servedOut(n uint64, first bool) {
	if first {
		s.tally.ops++
	}
	s.tally.out += n
}

// publishServed adds what the connection counted since its last call to
// the backend's and the peer's counters. flush calls it before it writes
// a batch (a WRITE counts before its answer leaves) and once the batch is
// out (a READ counts once its payload left); a write-imm or a send before
// its event or message reaches the owner (server_verbs.go), readDevice
// once a staged READ's payload left, and serve as it ends.
func (s *serverConn) publishServed() {
	t := s.tally
	if t == (servedTally{}) {
		return
	}
	s.tally = servedTally{}
	addServed(&s.b.served.ops, &s.b.served.bytesIn, &s.b.served.bytesOut, t)
	if s.peer != nil {
		addServed(&s.peer.ops, &s.peer.bytesIn, &s.peer.bytesOut, t)
	}
}

func addServed(ops, in, out *atomic.Uint64, t servedTally) {
	if t.ops != 0 {
		ops.Add(t.ops)
	}
	if t.in != 0 {
		in.Add(t.in)
	}
	if t.out != 0 {
		out.Add(t.out)
	}
}

// rejected counts a refused request.
func (s *serverConn) rejected() {
	s.b.served.rejected.Add(1)
	if s.peer != nil {
		s.peer.rejected.Add(1)
	}
}

// servedAtomic counts an atomic served (no bytes moved in bulk).
func (s *serverConn) servedAtomic() {
	s.b.served.ops.Add(1)
	if s.peer != nil {
		s.peer.ops.Add(1)
	}
}
