package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/rdmamgr/rdmamgr"
)

// ErrCertHost: a peer's certificate does not name the address its
// connection comes from (a certificate is bound to its host).
var ErrCertHost = fmt.Errorf("certificate does not name the peer's address: %w", rdmamgr.ErrUnauthenticated)

// ErrWrongName: the peer reached is not the member asked for (its
// certificate carries another name).
var ErrWrongName = fmt.Errorf("certificate names another member: %w", rdmamgr.ErrUnauthenticated)

// ErrCertValidity: a certificate of our own is expired or not yet valid.
var ErrCertValidity = errors.New("certificate not valid now")

// Name is the member name a certificate carries: its subject's common
// name, as 'rdmamgr certs --host NAME' issues it.
func Name(c *x509.Certificate) string { return c.Subject.CommonName }

// NamesAddr reports whether c may be used from ip: ip is one of its IP
// SANs. Loopback addresses are in every certificate this package issues.
func NamesAddr(c *x509.Certificate, ip netip.Addr) bool {
	return c.VerifyHostname(ip.Unmap().String()) == nil
}

// CheckValid returns an error wrapping ErrCertValidity when c is not
// valid at now.
func CheckValid(c *x509.Certificate, now time.Time) error {
	switch {
	case now.Before(c.NotBefore):
		return fmt.Errorf("certificate %q is not valid before %s: %w", Name(c), c.NotBefore.UTC().Format(time.RFC3339), ErrCertValidity)
	case now.After(c.NotAfter):
		return fmt.Errorf("certificate %q expired at %s: %w", Name(c), c.NotAfter.UTC().Format(time.RFC3339), ErrCertValidity)
	}
	return nil
}

// bindToHost makes server refuse, at the handshake, a client whose
// certificate does not name the IP address the connection comes from.
// Connections without an IP address (pipes in tests) are not checked.
func bindToHost(server *tls.Config) {
	base := server.Clone()
	server.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		ip, ok := connIP(hi.Conn)
		if !ok {
			return nil, nil
		}
		c := base.Clone()
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil // RequireAndVerifyClientCert refuses it
			}
			if leaf := cs.PeerCertificates[0]; !NamesAddr(leaf, ip) {
				return fmt.Errorf("client certificate %q used from %s: %w", Name(leaf), ip, ErrCertHost)
			}
			return nil
		}
		return c, nil
	}
}

func connIP(c net.Conn) (netip.Addr, bool) {
	if c == nil || c.RemoteAddr() == nil {
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// RequireName returns a copy of the client configuration c that also
// refuses a server whose certificate does not carry name: reaching a
// member by name reaches that member, not whoever its address record
// points at.
func RequireName(c *tls.Config, name string) *tls.Config {
	c = c.Clone()
	prev := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if prev != nil {
			if err := prev(cs); err != nil {
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("no certificate from the peer, want member %q: %w", name, ErrWrongName)
		}
		if got := Name(cs.PeerCertificates[0]); got != name {
			return fmt.Errorf("peer at %s is member %q, want %q: %w", cs.ServerName, got, name, ErrWrongName)
		}
		return nil
	}
	return c
}

// HostHint is what to tell the holder of c that peers refuse it from ip.
func HostHint(c *x509.Certificate, ip netip.Addr) string {
	var names []string
	for _, a := range c.IPAddresses {
		if !a.IsLoopback() {
			names = append(names, a.String())
		}
	}
	return fmt.Sprintf("our certificate %q names %s, not %s, the address we reach the peer from: peers refuse it (issue one for this host: rdmamgr certs --host %s=%s)",
		Name(c), strings.Join(names, ","), ip, Name(c), ip)
}
