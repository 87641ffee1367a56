package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

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
			if remoteguard.Sealed(ctx, c) {
				return fmt.Errorf("%s: the peer's control plane is sealed by a shared secret: %w", addr, remoteguard.ErrSecret)
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
		return fmt.Errorf("%s: TLS: %w", addr, err)
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
