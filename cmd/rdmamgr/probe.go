package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// probe connects to the manager's control port once, speaking what the
// manager speaks, so that a mistake is reported at once and by name
// instead of as a timeout of the request:
//
//   - with --tls-*: a full TLS handshake with our credentials (a healthy
//     TLS server counts no refusal: a bare connect did, as reason "tls"),
//     telling apart a server without TLS, another deployment's CA and a
//     certificate that does not name the address;
//   - without: the HTTP/2 preface, which a plain server answers with its
//     SETTINGS and a TLS server does not (it requires TLS).
//
// A refused or unreachable address fails in the time a connect takes.
func probe(ctx context.Context, addr string, nf *netFlags) error {
	if err := nf.load(); err != nil {
		return err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s: connection refused (is a manager serving there?)", addr)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: no connection within --timeout", addr)
	case err != nil:
		return fmt.Errorf("%s: %w", addr, err)
	}
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = c.SetDeadline(deadline)
	if nf.creds != nil {
		return probeTLS(c, addr, nf)
	}
	return probePlain(c, addr)
}

// h2Preface is HTTP/2's client connection preface and an empty SETTINGS
// frame.
var h2Preface = append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)

func probePlain(c net.Conn, addr string) error {
	if _, err := c.Write(h2Preface); err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	var hdr [9]byte
	_, err := io.ReadFull(c, hdr[:])
	var ne net.Error
	switch {
	case err == nil && hdr[3] == 4: // a SETTINGS frame: plain gRPC
		return nil
	case err == nil && hdr[0] == 0x15: // a TLS alert record
		return tlsRequired(addr)
	case errors.As(err, &ne) && ne.Timeout():
		return nil // slow, not wrong: the request's own timeout decides
	case err != nil:
		return tlsRequired(addr) // closed on our plain-text preface
	}
	return nil
}

func tlsRequired(addr string) error {
	return fmt.Errorf("%s requires TLS: give --tls-ca, --tls-cert and --tls-key (rdmamgr certs makes them)", addr)
}

func probeTLS(c net.Conn, addr string, nf *netFlags) error {
	cfg := nf.creds.Client.Clone()
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(c, cfg)
	err := tc.Handshake()
	if err == nil {
		return nil
	}
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &ua):
		return fmt.Errorf("%s: its certificate is not signed by --tls-ca %s (another deployment's CA?)", addr, nf.tlsCA)
	case errors.As(err, &he):
		return fmt.Errorf("%s: its certificate is not for this address (it is for %s): use the address the daemon answers at", addr, certNames(he.Certificate))
	case errors.As(err, &rh):
		return fmt.Errorf("%s does not speak TLS (a daemon without --tls-*): drop --tls-ca, --tls-cert and --tls-key, or give them to the daemon", addr)
	}
	return fmt.Errorf("%s: TLS handshake failed (the daemon refused our certificate?): %w", addr, err)
}

// certNames lists the names and addresses a certificate is valid for.
func certNames(c *x509.Certificate) string {
	if c == nil {
		return "?"
	}
	var s []string
	s = append(s, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		s = append(s, ip.String())
	}
	if len(s) == 0 {
		return c.Subject.CommonName
	}
	return fmt.Sprint(s)
}
