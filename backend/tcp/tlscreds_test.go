package tcp

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/rdmamgr/rdmamgr/certs"
)

// tlsCreds returns credentials valid for loopback from a fresh CA.
func tlsCreds(t testing.TB) *certs.Credentials {
	t.Helper()
	ca, err := certs.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	c, k, err := ca.Issue("host", nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return certs.New(pool, pair)
}
