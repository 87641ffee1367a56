// Package certs makes and loads the credentials of an rdmamgr deployment:
// one private certificate authority and, per host, a certificate that
// serves both as the host's TLS server identity and as its client identity
// (mutual TLS 1.3).
//
// The one idea: the CA is the deployment's, not the web's. Any certificate
// it signed is a full member. A dialler checks that the peer's certificate
// chains to the CA and names the address it dialled (IP or DNS SAN), so a
// member cannot be impersonated at another member's address by a holder of
// no certificate; a server checks the chain and that the client's
// certificate names the IP address the connection comes from (bind.go): a
// certificate is bound to its host. Issue host certificates with every
// address peers dial them at and every address they send from. The name a
// certificate carries (its common name, Name) is the member's identity:
// RequireName makes a client refuse a server that is not the member it
// asked for.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names inside a certs directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// Validity of what this package issues.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	HostValidity = 365 * 24 * time.Hour
)

// CA is a deployment's certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a CA named name. It does no I/O.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"rdmamgr"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Issue returns PEM certificate and key for a host named name, valid for
// hosts (IP addresses or DNS names) and always for localhost, 127.0.0.1
// and ::1. The certificate allows both server and client authentication.
func (ca *CA) Issue(name string, hosts []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"rdmamgr"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(HostValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	seen := map[string]bool{}
	for _, h := range append(append([]string{}, hosts...), "localhost", "127.0.0.1", "::1") {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// Credentials issues a host's certificate as Issue does and returns it
// as mutual TLS configurations that trust this CA, in memory (nothing
// written): a deployment's processes started together, and tests.
func (ca *CA) Credentials(name string, hosts []string) (*Credentials, error) {
	c, k, err := ca.Issue(name, hosts)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return New(pool, pair), nil
}

// Save writes the CA's certificate and key into dir (the key mode 0600).
func (ca *CA) Save(dir string) error {
	kder, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, CAKeyFile), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, CACertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}), 0o644)
}

// LoadCA reads a CA saved by Save.
func LoadCA(dir string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("certs: load CA: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA {
		return nil, errors.New("certs: load CA: not an ECDSA CA")
	}
	return &CA{Cert: cert, Key: key}, nil
}

// IssueFiles issues a host certificate and writes NAME.crt and NAME.key
// (mode 0600) into dir; it returns their paths.
func (ca *CA) IssueFiles(dir, name string, hosts []string) (certFile, keyFile string, err error) {
	c, k, err := ca.Issue(name, hosts)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := writeKey(keyFile, k); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(certFile, c, 0o644)
}

// writeKey writes a private key with mode 0600, also over an existing
// file of a wider mode (os.WriteFile keeps an existing file's mode).
func writeKey(path string, pem []byte) error {
	_ = os.Chmod(path, 0o600) // narrowed before the key is in it
	if err := os.WriteFile(path, pem, 0o600); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n.Add(n, big.NewInt(1))
}
