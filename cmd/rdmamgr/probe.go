package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/certs"
	"github.com/rdmamgr/rdmamgr/remoteguard"
)

// probeAuth runs, on the probe's connection c to the peer's control
// plane, what the control plane will ask of us, so that a refusal is said
// at once and why, rather than as a request that times out: with TLS, that
// our certificate names the address we reach the peer from, the TLS
// handshake (the peer's certificate, and the member's name with --peer
// NAME), and the peer's verdict on our certificate; without TLS and with
// --secret-file, the secret handshake.
func probeAuth(ctx context.Context, c net.Conn, addr string, cm *common) error {
	nf := &cm.net
	if err := nf.load(); err != nil {
		return err
	}
	if nf.creds == nil {
		if cm.secret == "" {
			sealed, silent := remoteguard.Greet(ctx, c)
			if sealed {
				return fmt.Errorf("%s: the peer's control plane is sealed by a shared secret: %w", addr, remoteguard.ErrSecret)
			}
			if silent {
				return fmt.Errorf("%s closed the connection without a word: it requires TLS (give --tls-ca, --tls-cert and --tls-key; rdmamgr certs makes them): %w", addr, rdmamgr.ErrUnauthenticated)
			}
			return nil
		}
		s, err := backend.LoadSecret(cm.secret)
		if err != nil {
			return usagef("%v", err)
		}
		if err := remoteguard.ProveSecret(ctx, c, s); err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		return nil
	}
	if ap, err := netip.ParseAddrPort(c.LocalAddr().String()); err == nil && !certs.NamesAddr(nf.creds.Leaf, ap.Addr()) {
		return fmt.Errorf("%s: %s: %w", addr, certs.HostHint(nf.creds.Leaf, ap.Addr().Unmap()), certs.ErrCertHost)
	}
	cfg := nf.clientTLS().Clone()
	cfg.ServerName, _, _ = net.SplitHostPort(addr)
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return tlsProbeError(addr, nf.tlsCA, err)
	}
	// In TLS 1.3 the server judges our certificate after our side of the
	// handshake is done: its verdict is its first bytes (gRPC's settings)
	// or an alert.
	dl := time.Now().Add(2 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = tc.SetReadDeadline(dl)
	_, err := tc.Read(make([]byte, 1))
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && strings.Contains(err.Error(), "remote error") {
		return fmt.Errorf("%s refused our certificate %q (%v): does it name the address we reach the peer from?", addr, certs.Name(nf.creds.Leaf), err)
	}
	return nil
}

// tlsProbeError says what a failed TLS handshake with the peer means: a
// certificate of another deployment's CA, one that does not name the
// address dialled, or a peer without TLS.
func tlsProbeError(addr, ca string, err error) error {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &ua):
		return fmt.Errorf("%s: its certificate is not signed by --tls-ca %s (another deployment's CA?): %w", addr, ca, err)
	case errors.As(err, &he):
		return fmt.Errorf("%s: its certificate is not for this address (it is for %s): use the address the daemon answers at: %w", addr, certNames(he.Certificate), err)
	case errors.As(err, &rh):
		return fmt.Errorf("%s does not speak TLS (a daemon without --tls-*): drop --tls-ca, --tls-cert and --tls-key, or give them to the daemon", addr)
	}
	return fmt.Errorf("%s: TLS: %w", addr, err)
}

// certNames lists the names and addresses a certificate is valid for.
func certNames(c *x509.Certificate) string {
	if c == nil {
		return "?"
	}
	s := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		s = append(s, ip.String())
	}
	return strings.Join(s, ", ")
}
