package backend

// PeerServedStats are the counters of what a backend served for one peer
// manager (the initiator of the routes it accepted), and how many of that
// peer's data connections are open.
type PeerServedStats struct {
	Ops      uint64
	BytesIn  uint64 // the peer wrote into our memory
	BytesOut uint64 // the peer read from our memory
	Rejected uint64
	Conns    int
}

// PeerServer is implemented by backends that count what they serve per
// peer manager; status shows it for each inbound route.
type PeerServer interface {
	// ServedByPeer returns the counters by peer manager id.
	ServedByPeer() map[uint64]PeerServedStats
}
