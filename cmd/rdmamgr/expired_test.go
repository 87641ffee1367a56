package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/certs"
)

// writeCert writes a host certificate for "a" from ca valid from nb to na.
func writeCert(t *testing.T, ca *certs.CA, dir, name string, nb, na time.Time) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "a"},
		NotBefore: nb, NotAfter: na, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	cf, kf := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cf, kf
}

// Issue 24 row 12: serve accepted an expired certificate of its own. Now
// an expired or not-yet-valid own certificate is refused: exit 2, one line.
func TestServeRefusesInvalidOwnCert(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA("t")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for name, span := range map[string][2]time.Time{
		"expired": {now.Add(-48 * time.Hour), now.Add(-24 * time.Hour)},
		"not_yet": {now.Add(24 * time.Hour), now.Add(48 * time.Hour)},
	} {
		cf, kf := writeCert(t, ca, dir, name, span[0], span[1])
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, stderr, code := runBin(t, ctx, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "",
			"--tls-ca", filepath.Join(dir, certs.CACertFile), "--tls-cert", cf, "--tls-key", kf)
		cancel()
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 2 || !strings.Contains(stderr, "certificate not valid now") || len(lines) > 2 {
			t.Errorf("%s: exit %d, stderr %q: want exit 2 and one line", name, code, stderr)
		}
	}
}
