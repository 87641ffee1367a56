package remoteguard

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

func secret(t *testing.T, s string) backend.Secret {
	t.Helper()
	k, err := backend.NewSecret([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The secret handshake passes with the same secret on both sides, and
// fails on both sides otherwise, without the secret on the wire.
func TestSecretHandshake(t *testing.T) {
	good, other := secret(t, "a deployment secret of some length"), secret(t, "somebody else's secret, also long")
	for _, c := range []struct {
		name           string
		client, server backend.Secret
		ok             bool
	}{
		{"same secret", good, good, true},
		{"another secret", other, good, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			_ = b.SetDeadline(time.Now().Add(5 * time.Second))
			serr := make(chan error, 1)
			go func() { serr <- serverProve(b, c.server); b.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cerr := ProveSecret(ctx, a, c.client)
			a.Close()
			se := <-serr
			if c.ok && (cerr != nil || se != nil) {
				t.Fatalf("refused: client %v, server %v", cerr, se)
			}
			if !c.ok && (!errors.Is(se, rdmamgr.ErrUnauthenticated) || !errors.Is(cerr, ErrSecret)) {
				t.Fatalf("want both refused: client %v, server %v", cerr, se)
			}
		})
	}
	// A client without the secret sees that the server is sealed.
	a, b := net.Pipe()
	defer a.Close()
	go func() { _ = b.SetDeadline(time.Now().Add(5 * time.Second)); _ = serverProve(b, good); b.Close() }()
	if !Sealed(context.Background(), a) {
		t.Fatal("Sealed = false against a sealed server")
	}
}
