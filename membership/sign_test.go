package membership

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/certs"
)

func openT(t *testing.T, ctx context.Context, cfg Config) *Registry {
	t.Helper()
	for {
		r, err := Open(cfg)
		if err == nil {
			t.Cleanup(func() { r.Close() })
			return r
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func identity(t *testing.T, ca *certs.CA, name, addr string) *tls.Certificate {
	t.Helper()
	c, k, err := ca.Issue(name, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

// A member's record is signed and bound to its certificate's name; a
// writer to etcd cannot forge one that verifies, and a record overwritten
// or removed while the member lives is written back.
func TestSignedRecords(t *testing.T) {
	ep := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ca, err := certs.NewCA("t")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	idA, idB := identity(t, ca, "a", "10.212.0.1"), identity(t, ca, "b", "10.212.0.2")
	base := Config{Endpoints: []string{ep}, Cluster: "t", TTL: 5 * time.Second, DialTimeout: time.Second}
	withID := func(id *tls.Certificate) Config { c := base; c.Identity, c.Roots = id, roots; return c }
	ra := openT(t, ctx, withID(idA))
	rv := openT(t, ctx, withID(nil)) // a follower: verifies, signs nothing
	attacker := openT(t, ctx, base)  // writes what it likes

	if _, err := ra.Register(ctx, Member{Name: "b", Address: "10.212.0.1:7000", Manager: "m"}); !errors.Is(err, ErrNotOurName) {
		t.Fatalf("register b with a's certificate: %v, want ErrNotOurName", err)
	}
	a := Member{Name: "a", Address: "10.212.0.1:7000", Manager: "m"}
	ga, err := ra.Register(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ga.Close()
	got, err := rv.Lookup(ctx, "a")
	if err != nil || got.Address != a.Address || got.Sig == "" {
		t.Fatalf("Lookup(a) = %+v, %v", got, err)
	}

	// Forgeries under a's name: unsigned, signed by b, a's own record
	// replayed under another address (the signature no longer matches).
	bSigned := Member{Name: "a", Address: "10.212.0.2:7000", Manager: "m"}
	rb := openT(t, ctx, withID(idB))
	bSigned.Name = "b"
	if err := rb.sign(&bSigned); err != nil {
		t.Fatal(err)
	}
	bSigned.Name = "a"
	moved := got
	moved.Address = "10.212.0.2:7000"
	unsigned := Member{Name: "a", Address: "10.212.0.3:7000", Manager: "m"}
	for i, f := range []Member{unsigned, bSigned, moved} {
		v, _ := json.Marshal(f)
		if _, err := attacker.cli.Put(ctx, attacker.prefix()+"a", string(v)); err != nil {
			t.Fatal(err)
		}
		waitRestored(t, ga, i+1)
		if m, err := rv.Lookup(ctx, "a"); err != nil || m.Address != a.Address {
			t.Fatalf("forgery %d: Lookup(a) = %+v, %v after the member restored its record", i, m, err)
		}
	}
	if _, err := attacker.cli.Delete(ctx, attacker.prefix()+"a"); err != nil {
		t.Fatal(err)
	}
	waitRestored(t, ga, 4)
	if m, err := rv.Lookup(ctx, "a"); err != nil || m.Address != a.Address {
		t.Fatalf("after a delete: Lookup(a) = %+v, %v", m, err)
	}

	// A forged record of a name no one defends is refused and not listed.
	v, _ := json.Marshal(Member{Name: "c", Address: "10.212.0.3:7000", Manager: "m"})
	if _, err := attacker.cli.Put(ctx, attacker.prefix()+"c", string(v)); err != nil {
		t.Fatal(err)
	}
	if _, err := rv.Lookup(ctx, "c"); !errors.Is(err, ErrForged) {
		t.Fatalf("Lookup(forged c) = %v, want ErrForged", err)
	}
	ms, err := rv.List(ctx)
	if err != nil || len(ms) != 1 || ms[0].Name != "a" {
		t.Fatalf("List = %+v, %v; want a alone", ms, err)
	}
}

func waitRestored(t *testing.T, g *Registration, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for g.Restored() < n {
		if time.Now().After(deadline) {
			t.Fatalf("record restored %d times, want %d", g.Restored(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
