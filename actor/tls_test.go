package actor

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/rdmamgr/rdmamgr/certs"
)

// testTLS returns StartRemote options for mutual TLS with a fresh CA.
func testTLS(t testing.TB) []RemoteOption {
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
	cr := certs.New(pool, pair)
	return []RemoteOption{WithTLS(cr.Server, cr.Client)}
}
