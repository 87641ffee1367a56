package ibverbs

import (
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// The TCP fallback inside an ibverbs route (Config.Fallback): a peer's
// device buffer that its owner could not register with its NIC (no
// dma-buf: its handle has no RDMA key) is reached over a second route to
// the same peer, of the fallback backend (the node's TCP backend, whose
// owner stages device memory through pinned buffers), set up in the same
// handshake: the fallback's route info rides in ours (version 3,
// info.go), the responder's answer in its. The initiator's route posts
// exactly those operations on the fallback route (toFallback); its
// Close, failure, Stats and Cancel cover both. This file holds the
// parts that need no device (the ibverbs build's route.go, setup.go and
// post.go use them).

// toFallback reports whether wr goes to the fallback route: a Put or
// Get on a peer's device memory whose handle has no RDMA key (its owner
// has no dma-buf registration), not through a far agent (Via). Every
// other operation stays on the queue pair (and a device buffer's
// PutWithImm and atomics are refused there, as the fallback would).
func toFallback(wr *backend.WorkRequest) bool {
	return (wr.Op == backend.OpWrite || wr.Op == backend.OpRead) &&
		wr.Via == 0 &&
		wr.Remote.Location != buffer.Host &&
		wr.Remote.RDMA == (buffer.RDMAKey{})
}

// fallbackAnswer is the responder's fallback part for an initiator's
// info peer: nil for a version 2 initiator (answered in version 2), an
// empty one where the initiator has no fallback or one of another kind
// than ours (kind, "" without one), else the fallback's answer (made by
// accept, from the initiator's fallback info). Its error is accept's.
func fallbackAnswer(peer routeInfo, kind string, accept func(info []byte) ([]byte, error)) (*fallbackInfo, error) {
	if peer.fb == nil {
		return nil, nil
	}
	if kind == "" || peer.fb.kind != kind {
		return &fallbackInfo{}, nil
	}
	a, err := accept(peer.fb.info)
	if err != nil {
		return nil, err
	}
	return &fallbackInfo{kind: kind, info: a}, nil
}

// addStats adds the fallback route's figures to the queue pair's.
func addStats(s, f backend.RouteStats) backend.RouteStats {
	s.Ops += f.Ops
	s.BytesPut += f.BytesPut
	s.BytesGot += f.BytesGot
	s.Errors += f.Errors
	s.InFlight += f.InFlight
	return s
}
