package remoteguard

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/rdmamgr/rdmamgr/internal/control"
)

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
func (g *guard) checkSender(c *connPeer, p *protoactor.PID) error {
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
func (g *guard) checkTarget(p *protoactor.PID) error {
	if p.Address != g.sys.Address() {
		return fmt.Errorf("target %s is not in this process (%s)", pidString(p), g.sys.Address())
	}
	return nil
}

// stamp marks e as remote, naming its peer: its checked sender address, or
// the connection's IP when it has no sender.
func stamp(e *remote.MessageEnvelope, sender *protoactor.PID, c *connPeer) {
	peer := c.remote.String()
	if sender != nil {
		peer = sender.Address
	}
	control.Stamp(e, peer)
}

// pidString spells a PID as the manager's logs do: "address/id".
func pidString(p *protoactor.PID) string {
	if p == nil {
		return "<nil>"
	}
	return p.Address + "/" + p.Id
}
