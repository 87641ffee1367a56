package tcp

import (
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
	cr, err := ca.Credentials("host", nil)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}
