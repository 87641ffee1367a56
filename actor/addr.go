package actor

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/rdmamgr/rdmamgr"
)

// Addresses that reach: a manager advertises an address peers can dial,
// never a wildcard, and never loopback to another host; a client replies
// from the local address of its route to the peer.

// ErrUnreachableReply means a request would name a reply address the peer
// cannot reach (loopback toward another host): it would only time out.
// It is rdmamgr.ErrUnreachableReply.
var ErrUnreachableReply = rdmamgr.ErrUnreachableReply

// IsWildcard reports whether host (no port; "" counts) binds every address.
func IsWildcard(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// IsLoopback reports whether host names this host only (loopback IP or
// "localhost").
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RoutableHost returns the first global unicast address of the first
// interface that is up and not loopback, preferring IPv4, and the
// interface's name. It fails when the host has none.
func RoutableHost() (host, ifName string, err error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", "", err
	}
	var v6, v6If string
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || !ipn.IP.IsGlobalUnicast() {
				continue
			}
			if ipn.IP.To4() != nil {
				return ipn.IP.String(), ifc.Name, nil
			}
			if v6 == "" {
				v6, v6If = ipn.IP.String(), ifc.Name
			}
		}
	}
	if v6 != "" {
		return v6, v6If, nil
	}
	return "", "", errors.New("no interface is up with a global unicast address: give --advertise HOST")
}

// AdvertiseHost decides the host peers use for a manager that binds
// listenHost: advertise when set (it must not be a wildcard), the bind
// address when it is specific, else RoutableHost. picked reports that the
// host was picked from the interfaces (the caller logs it).
func AdvertiseHost(listenHost, advertise string) (host string, picked bool, err error) {
	if advertise != "" {
		h := advertise
		if hh, _, err := net.SplitHostPort(advertise); err == nil {
			h = hh
		}
		if IsWildcard(h) {
			return "", false, fmt.Errorf("advertise %q: a wildcard address is not dialable", advertise)
		}
		return h, false, nil
	}
	if !IsWildcard(listenHost) {
		return listenHost, false, nil
	}
	h, _, err := RoutableHost()
	if err != nil {
		return "", false, fmt.Errorf("listen on %q without an advertised address: %w", listenHost, err)
	}
	return h, true, nil
}

// ReplyHost returns the local address of this host's route to peer
// ("host:port"): the address a reply from peer reaches us at. It sends
// nothing (a UDP socket is connected, which only looks the route up).
func ReplyHost(peer string) (string, error) {
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		return "", fmt.Errorf("peer %q: %w", peer, err)
	}
	if IsLoopback(host) {
		return "127.0.0.1", nil
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return "", fmt.Errorf("no route to %s: %w", host, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// ReplyListen returns the address a client that talks to peer should
// listen on: the local address of the route to peer, port 0.
func ReplyListen(peer string) (string, error) {
	h, err := ReplyHost(peer)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(h, "0"), nil
}

// CheckReply fails with ErrUnreachableReply when self (our advertised
// "host:port") is loopback and peer is not: the peer's replies would go to
// its own loopback.
func CheckReply(self, peer string) error {
	sh, _, err := net.SplitHostPort(self)
	if err != nil {
		return nil // not a host:port address (no remote): nothing to check
	}
	ph, _, err := net.SplitHostPort(peer)
	if err != nil {
		return nil
	}
	if IsLoopback(sh) && !IsLoopback(ph) && ph != "nonhost" {
		return fmt.Errorf("our address %s is loopback but peer %s is on another host; listen on the address of the route to it (or a wildcard with an advertised address): %w", self, peer, ErrUnreachableReply)
	}
	return nil
}

func joinPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

func splitHost(addr string) (string, error) {
	h, _, err := net.SplitHostPort(addr)
	return h, err
}
