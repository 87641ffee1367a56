//go:build linux

package agenthosts

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"time"

	"github.com/rdmamgr/rdmamgr/test/netns"
)

// tcpConn is one established TCP connection as ss shows it inside a host.
type tcpConn struct{ local, peer netip.AddrPort }

// established lists h's established TCP connections (`ss -Htn state
// established`, run inside h).
func established(h *netns.Host) ([]tcpConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	path, args := h.Wrap("ss", "-Htn", "state", "established")
	out, err := exec.CommandContext(ctx, path, args...).Output()
	if err != nil {
		return nil, fmt.Errorf("%s: ss: %w", h.Name, err)
	}
	var cs []tcpConn
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		l, err1 := parseAddrPort(f[2])
		p, err2 := parseAddrPort(f[3])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: ss line %q", h.Name, line)
		}
		cs = append(cs, tcpConn{l, p})
	}
	return cs, nil
}

// parseAddrPort reads ss's "10.212.0.1:7000", "[::ffff:10.212.0.1]:7000"
// or "[::1]:7000" (IPv4-mapped addresses unmapped).
func parseAddrPort(s string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, err
	}
	host, _, _ = strings.Cut(host, "%") // a zone
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ap, err := netip.ParseAddrPort(net.JoinHostPort(a.Unmap().String(), port))
	return ap, err
}

// connCount is what one host holds, split by kind.
type connCount struct {
	Data, Control, Local int            // data and control connections to other hosts; connections within the host
	AgentData, AgentCtl  int            // those of Data and Control with an agent at one end
	DataTo               map[string]int // data connections by other host's name
	AgentTo              map[string]int // those of them with an agent's listener at one end
}

// countConns counts every host's established connections. A connection to
// another host is data when either end is a TCP data listener of c (a
// worker's or an agent's), else control (gRPC between actor systems).
func (c *cluster) countConns() (map[string]*connCount, error) {
	data, agent, agentCtl := map[netip.AddrPort]bool{}, map[netip.AddrPort]bool{}, map[netip.AddrPort]bool{}
	for _, w := range c.workers {
		if ap, err := parseAddrPort(w.data); err == nil {
			data[ap] = true
		}
	}
	for _, a := range c.agents {
		if a != nil && a.data != "" {
			if ap, err := parseAddrPort(a.data); err == nil {
				data[ap], agent[ap] = true, true
			}
			if ap, err := parseAddrPort(a.addr); err == nil {
				agentCtl[ap] = true
			}
		}
	}
	byAddr := map[netip.Addr]string{}
	for _, h := range c.net.Hosts {
		byAddr[netip.MustParseAddr(h.Addr)] = h.Name
	}
	out := map[string]*connCount{}
	for _, h := range c.net.Hosts {
		cs, err := established(h)
		if err != nil {
			return nil, err
		}
		n := &connCount{DataTo: map[string]int{}, AgentTo: map[string]int{}}
		out[h.Name] = n
		for _, x := range cs {
			other, ok := byAddr[x.peer.Addr()]
			switch {
			case !ok || other == h.Name:
				n.Local++
			case data[x.peer] || data[x.local]:
				n.Data++
				n.DataTo[other]++
				if agent[x.peer] || agent[x.local] {
					n.AgentTo[other]++
					n.AgentData++
				}
			default:
				n.Control++
				if agentCtl[x.peer] || agentCtl[x.local] {
					n.AgentCtl++
				}
			}
		}
	}
	return out, nil
}
