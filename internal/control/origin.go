package control

import (
	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
)

const (
	// originHeader marks an envelope that came over the network.
	originHeader = "rdmamgr-origin"
	originRemote = "remote"
	// peerHeader names the peer of a remote envelope for per-peer caps:
	// its checked sender address, or the connection's IP when it has no
	// sender.
	peerHeader = "rdmamgr-peer"
)

// Stamp marks e as having come over the network from peer, overwriting
// whatever the peer put in those headers.
func Stamp(e *remote.MessageEnvelope, peer string) {
	if e.MessageHeader == nil || e.MessageHeader.HeaderData == nil {
		e.MessageHeader = &remote.MessageHeader{HeaderData: make(map[string]string, 2)}
	}
	e.MessageHeader.HeaderData[originHeader] = originRemote
	e.MessageHeader.HeaderData[peerHeader] = peer
}

// StampEnvelope stamps an in-process envelope as Stamp stamps one from the
// network: for tests that hand the manager a message as the guard would.
func StampEnvelope(e *protoactor.MessageEnvelope, peer string) {
	e.SetHeader(originHeader, originRemote)
	e.SetHeader(peerHeader, peer)
}

// IsRemote reports whether a message with header h came over the network.
func IsRemote(h protoactor.ReadonlyMessageHeader) bool {
	return h != nil && h.Get(originHeader) == originRemote
}

// Peer names the peer of a remote message, for per-peer caps ("" for a
// local one).
func Peer(h protoactor.ReadonlyMessageHeader) string {
	if h == nil {
		return ""
	}
	return h.Get(peerHeader)
}
