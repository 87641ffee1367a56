package actor

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
)

// Locality and reply addresses are never taken from a peer's word.
//
// protoactor delivers an envelope from the network as if it were sent in
// this process, with the sender PID the peer wrote into it, and answers
// (ctx.Respond, or any Send to that PID) by dialling the sender's address.
// So a peer could claim to be local (our own address as sender), or make us
// dial any address it names (reflection, and a route table full of
// "connecting" routes to its listener). The guard therefore:
//
//   - stamps every envelope that arrives over gRPC with the originHeader
//     (overwriting whatever the peer put there): the manager takes an
//     envelope as remote exactly when it carries that header, that is by
//     how it arrived, never by its sender address;
//   - refuses (drops, counts, logs sampled) an envelope whose sender
//     claims one of our own addresses, names a host other than the one the
//     gRPC connection comes from (hosts are compared as IP literals; only
//     "localhost" is accepted as a name, on loopback connections), or names
//     an address other than the first one this connection spoke for: one
//     connection, one peer;
//   - refuses an envelope addressed to another process (protoactor would
//     relay it there), and a Watch or Unwatch whose watcher is not the
//     connection's peer (we would send Terminated to it).
//
// Replies thus go only to the peer itself: to an address on the host the
// connection came from, the one address that connection speaks for. The
// manager never dials an address a peer merely names: RequestQueuePair
// (which sets up a route to the named manager) is refused to remote
// callers, and a route handshake's initiator address is only logged.
// Without an authenticated control plane a peer can still name another
// port on its own host; once control runs over mutual TLS the bound
// address should come from the peer's certificate instead.

const (
	// originHeader marks an envelope that came over the network.
	originHeader = "rdmamgr-origin"
	originRemote = "remote"
	// peerHeader names the peer of a remote envelope for per-peer caps:
	// its checked sender address, or the connection's IP when it has no
	// sender.
	peerHeader = "rdmamgr-peer"
)

// isRemote reports whether the message being handled came over the
// network.
func isRemote(ctx protoactor.Context) bool {
	h := ctx.MessageHeader()
	return h != nil && h.Get(originHeader) == originRemote
}

// remotePeer names the peer of a remote message, for per-peer caps.
func remotePeer(ctx protoactor.Context) string {
	if h := ctx.MessageHeader(); h != nil {
		return h.Get(peerHeader)
	}
	return ""
}

// connPeer is what the guard knows about the gRPC connection of a stream.
type connPeer struct {
	src    string     // the connection's source address, for logs
	remote netip.Addr // the connection's source IP
	local  netip.Addr // our side's IP

	mu    sync.Mutex
	bound string // the one sender address this connection speaks for
}

func addrOf(a net.Addr) netip.Addr {
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// sameHost reports whether a and b are the same host for our purposes:
// equal, or both loopback.
func sameHost(a, b netip.Addr) bool {
	return a.IsValid() && b.IsValid() && (a == b || (a.IsLoopback() && b.IsLoopback()))
}

// checkSender checks that p may be the sender of an envelope on this
// connection and binds the connection to its address on first use.
func (g *remoteGuard) checkSender(c *connPeer, p *protoactor.PID) error {
	addr := p.Address
	if addr == "" || addr == "nonhost" || addr == g.sys.Address() {
		return fmt.Errorf("sender %q is one of our own addresses", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("sender %q: %v", addr, err)
	}
	var ip netip.Addr
	if host == "localhost" {
		ip = netip.IPv6Loopback()
	} else if ip, err = netip.ParseAddr(host); err != nil {
		return fmt.Errorf("sender %q: not an IP address", addr)
	}
	ip = ip.Unmap()
	if !sameHost(ip, c.remote) {
		return fmt.Errorf("sender %q on a connection from %s", addr, c.remote)
	}
	if _, ourPort, err := net.SplitHostPort(g.sys.Address()); err == nil && port == ourPort && sameHost(ip, c.local) {
		return fmt.Errorf("sender %q is our own listener", addr)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bound == "" {
		c.bound = addr
	} else if c.bound != addr {
		return fmt.Errorf("sender %q on a connection that speaks for %q", addr, c.bound)
	}
	return nil
}

// checkTarget refuses targets in other processes.
func (g *remoteGuard) checkTarget(p *protoactor.PID) error {
	if p.Address != g.sys.Address() {
		return fmt.Errorf("target %q is not in this process (%s)", p.String(), g.sys.Address())
	}
	return nil
}

// stamp marks e as remote, naming its peer.
func stamp(e *remote.MessageEnvelope, sender *protoactor.PID, c *connPeer) {
	if e.MessageHeader == nil || e.MessageHeader.HeaderData == nil {
		e.MessageHeader = &remote.MessageHeader{HeaderData: make(map[string]string, 2)}
	}
	e.MessageHeader.HeaderData[originHeader] = originRemote
	peer := c.remote.String()
	if sender != nil {
		peer = sender.Address
	}
	e.MessageHeader.HeaderData[peerHeader] = peer
}
