package tcp_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/certs"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

func startTLS(t testing.TB, owner uint64, creds *certs.Credentials) (*tcp.Backend, *memreg.Registry) {
	t.Helper()
	reg := memreg.NewRegistry(owner, buffer.Limits{})
	b, err := tcp.New(tcp.Config{ListenAddr: "127.0.0.1:0", ServerTLS: creds.Server, ClientTLS: creds.Client}, reg, nil)
	if err != nil {
		t.Fatalf("tcp.New: %v", err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return b, reg
}

// TestConformanceTLS runs the conformance suite over TLS data connections
// (--data-tls): the protocol does not depend on the transport.
func TestConformanceTLS(t *testing.T) {
	creds := tcp.TLSCreds(t)
	backendtest.Run(t, backendtest.Factory{
		NewBackend: func(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry) {
			return startTLS(t, owner, creds)
		},
		WrongKeyErr:              rdmamgr.ErrBadKey,
		ReleasedErr:              rdmamgr.ErrReleased,
		OutOfRangeErr:            rdmamgr.ErrOutOfRange,
		RevokedErr:               rdmamgr.ErrRevoked,
		RouteSurvivesRemoteError: true,
		Verbs:                    true,
	})
}

// A data connection with a certificate of another CA, or without TLS, is
// refused before its hello.
func TestTLSRefusesStrangers(t *testing.T) {
	server, _ := startTLS(t, 1, tcp.TLSCreds(t))
	defer server.Close()
	for name, creds := range map[string]*certs.Credentials{"another CA": tcp.TLSCreds(t), "no TLS": nil} {
		reg := memreg.NewRegistry(2, buffer.Limits{})
		cfg := tcp.Config{ListenAddr: "127.0.0.1:0"}
		if creds != nil {
			cfg.ServerTLS, cfg.ClientTLS = creds.Server, creds.Client
		}
		client, err := tcp.New(cfg, reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := client.Start(ctx); err != nil {
			t.Fatal(err)
		}
		pending, info, err := client.PrepareRoute(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if creds == nil {
			// The route handshake says it first; a client that claims TLS
			// anyway (the flag is the top bit of its info's connection
			// count) is refused at its data connections' hello.
			_, err := server.AcceptRoute(ctx, 2, info)
			if !errors.Is(err, rdmamgr.ErrUnauthenticated) || !strings.Contains(err.Error(), "--data-tls on one side only") {
				t.Fatalf("plain initiator to a TLS responder: %v, want ErrUnauthenticated naming --data-tls", err)
			}
			info = append([]byte(nil), info...)
			info[3] |= 0x80
		}
		answer, err := server.AcceptRoute(ctx, 2, info)
		if err != nil {
			t.Fatal(err)
		}
		rt, err := pending.Complete(ctx, answer)
		if err == nil {
			rt.Close()
			t.Errorf("%s: route connected", name)
		} else if creds != nil && !errors.Is(err, rdmamgr.ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", name, err)
		}
		client.Close()
	}
	// Both refusals are counted by the server (the TLS one at its
	// handshake, the plain one at its hello).
	deadline := time.Now().Add(5 * time.Second)
	for server.Served().AuthFail < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("server counted %d authentication failures, want 2", server.Served().AuthFail)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An initiator with --data-tls and a responder without are told so at the
// route handshake (issue 23: it failed after 3 s with an unrelated line).
func TestTLSOnOneSideOnly(t *testing.T) {
	client, _ := startTLS(t, 1, tcp.TLSCreds(t))
	defer client.Close()
	server, err := tcp.New(tcp.Config{ListenAddr: "127.0.0.1:0"}, memreg.NewRegistry(2, buffer.Limits{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	ctx := context.Background()
	if err := server.Start(ctx); err != nil {
		t.Fatal(err)
	}
	_, info, err := client.PrepareRoute(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = server.AcceptRoute(ctx, 1, info)
	if !errors.Is(err, rdmamgr.ErrUnauthenticated) || !strings.Contains(err.Error(), "initiator encrypts its data connections, this responder does not") {
		t.Fatalf("TLS initiator to a plain responder: %v, want ErrUnauthenticated naming --data-tls", err)
	}
}
