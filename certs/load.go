package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"
)

// Credentials are one host's TLS configurations for both roles.
type Credentials struct {
	// Server requires and verifies a client certificate from the CA.
	Server *tls.Config
	// Client presents the host certificate and verifies the server's
	// against the CA and the dialled name (set ServerName, or let gRPC set
	// it from the address).
	Client *tls.Config
	// Pool is the CA; Pair and Leaf our certificate. Name(Leaf) is this
	// host's member name.
	Pool *x509.CertPool
	Pair tls.Certificate
	Leaf *x509.Certificate
}

// Load reads a CA certificate and a host's certificate and key, and returns
// mutual TLS 1.3 configurations. A certificate that is expired or not
// yet valid is refused (ErrCertValidity).
func Load(caFile, certFile, keyFile string) (*Credentials, error) {
	if caFile == "" || certFile == "" || keyFile == "" {
		return nil, errors.New("certs: want all of the CA certificate, the certificate and its key")
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("certs: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("certs: %s holds no PEM certificate", caFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("certs: %s: %w", certFile, err)
	}
	if err := CheckValid(leaf, time.Now()); err != nil {
		return nil, fmt.Errorf("certs: %s: %w", certFile, err)
	}
	return New(pool, pair), nil
}

// New returns mutual TLS 1.3 configurations trusting only pool and
// presenting pair. The server refuses a client whose certificate does not
// name the IP address its connection comes from (bind.go).
func New(pool *x509.CertPool, pair tls.Certificate) *Credentials {
	leaf := pair.Leaf
	if leaf == nil && len(pair.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(pair.Certificate[0])
	}
	c := &Credentials{Pool: pool, Pair: pair, Leaf: leaf,
		Server: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{pair},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
		},
		Client: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{pair},
			RootCAs:      pool,
		},
	}
	bindToHost(c.Server)
	return c
}
