package actor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"google.golang.org/protobuf/proto"
)

func authPair(t *testing.T, sa, sb backend.Secret) (a, b *Manager) {
	t.Helper()
	sys := NewActorSystem(nil)
	var err error
	if a, err = New(sys, Config{Name: "auth-a", Secret: sa}); err != nil {
		t.Fatal(err)
	}
	if b, err = New(sys, Config{Name: "auth-b", Secret: sb}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Manager{a, b} {
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { a.Close(); b.Close(); sys.Shutdown() })
	return a, b
}

func secret(t *testing.T, s string) backend.Secret {
	t.Helper()
	sec, err := backend.NewSecret([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

func TestSecretRoutes(t *testing.T) {
	s := secret(t, "one deployment's shared secret")
	a, b := authPair(t, s, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	remote, err := NewClient(a.sys, b.PID()).RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	local, _ := a.Client().RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
	qp, err := a.Client().RequestQueuePair(ctx, b.PID())
	if err != nil {
		t.Fatalf("route between managers sharing a secret: %v", err)
	}
	defer qp.Release()
	if err := qp.Put(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSecretMismatch(t *testing.T) {
	for name, sa := range map[string]backend.Secret{
		"none":  {},
		"other": secret(t, "somebody else's secret!!"),
	} {
		t.Run(name, func(t *testing.T) {
			a, b := authPair(t, sa, secret(t, "one deployment's shared secret"))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := a.Client().RequestQueuePair(ctx, b.PID())
			if !errors.Is(err, backend.ErrUnauthenticated) {
				t.Fatalf("route with %s secret: %v, want ErrUnauthenticated", name, err)
			}
			st, err := b.Client().Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.AuthFailures == 0 {
				t.Fatal("refused handshake not counted")
			}
		})
	}
}

// A recorded handshake cannot be replayed, and a forged one never verifies.
func TestHandshakeReplayAndForgery(t *testing.T) {
	s := secret(t, "one deployment's shared secret")
	_, b := authPair(t, s, s)
	tb := b.Backend()
	_, info, err := tb.PrepareRoute(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	hs := &rdmapb.RouteHandshake{Version: ProtocolVersion, InitiatorId: 42, InitiatorAddr: "x", Backend: "tcp", Endpoint: info, Nonce: backend.Nonce()}
	hs.Mac = handshakeMAC(s, hs)
	if r := b.acceptRoute(hs); r.Error != nil {
		t.Fatalf("genuine handshake refused: %v", r.Error)
	} else if !s.Verify(r.Mac, labelReply, hs.Nonce, u64(uint64(r.Version)), u64(r.ResponderId), []byte(r.Backend), r.Endpoint, u64(0)) {
		t.Fatal("reply MAC does not verify")
	}
	if r := b.acceptRoute(hs); codeOf(r.Error) != rdmapb.Code_UNAUTHENTICATED {
		t.Fatalf("replayed handshake: %v, want UNAUTHENTICATED", r.Error)
	}
	forged := proto.Clone(hs).(*rdmapb.RouteHandshake)
	forged.Nonce = backend.Nonce()
	forged.InitiatorId = 43 // MAC of the old fields
	if r := b.acceptRoute(forged); codeOf(r.Error) != rdmapb.Code_UNAUTHENTICATED {
		t.Fatalf("forged handshake: %v, want UNAUTHENTICATED", r.Error)
	}
	noMAC := proto.Clone(hs).(*rdmapb.RouteHandshake)
	noMAC.Nonce, noMAC.Mac = backend.Nonce(), nil
	if r := b.acceptRoute(noMAC); codeOf(r.Error) != rdmapb.Code_UNAUTHENTICATED {
		t.Fatalf("handshake without MAC: %v, want UNAUTHENTICATED", r.Error)
	}
}
