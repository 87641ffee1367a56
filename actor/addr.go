package actor

import (
	"fmt"
	"net"

	"github.com/rdmamgr/rdmamgr"
)

// Addresses that reach: a client replies from the local address of its
// route to the peer, never from loopback toward another host. (What a
// listener advertises is package remoteguard's.)

// isLoopback reports whether host names this host only (loopback IP or
// "localhost").
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// replyHost returns the local address of this host's route to peer
// ("host:port"): the address a reply from peer reaches us at. It sends
// nothing (a UDP socket is connected, which only looks the route up).
func replyHost(peer string) (string, error) {
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		return "", fmt.Errorf("peer %q: %w", peer, err)
	}
	if isLoopback(host) {
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
	h, err := replyHost(peer)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(h, "0"), nil
}

// checkReply fails with ErrUnreachableReply when self (our advertised
// "host:port") is loopback and peer is not: the peer's replies would go to
// its own loopback.
func checkReply(self, peer string) error {
	sh, _, err := net.SplitHostPort(self)
	if err != nil {
		return nil // not a host:port address (no remote): nothing to check
	}
	ph, _, err := net.SplitHostPort(peer)
	if err != nil {
		return nil
	}
	if isLoopback(sh) && !isLoopback(ph) && ph != "nonhost" {
		return fmt.Errorf("our address %s is loopback but peer %s is on another host; listen on the address of the route to it (or a wildcard with an advertised address): %w", self, peer, rdmamgr.ErrUnreachableReply)
	}
	return nil
}
