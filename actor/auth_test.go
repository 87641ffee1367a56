package actor

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
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
		if err := startTCP(context.Background(), m); err != nil {
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
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil {
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
			if !errors.Is(err, rdmamgr.ErrUnauthenticated) {
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
	tb := b.preferred()
	_, info, err := tb.PrepareRoute(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	hs := &rdmapb.RouteHandshake{Version: ProtocolVersion, InitiatorId: 42, InitiatorAddr: "x", Backend: "tcp", Endpoint: info, Nonce: backend.Nonce()}
	hs.Mac = handshakeMAC(s, hs)
	if r := b.acceptRoute(hs); r.Error != nil {
		t.Fatalf("genuine handshake refused: %v", r.Error)
	} else if !replyVerifies(s, hs.Nonce, r) {
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

// Each MAC covers every field it lists, on both sides: changing any one of
// them makes the other side's check fail.
func TestMACFieldLists(t *testing.T) {
	s := secret(t, "one deployment's shared secret")
	hs := &rdmapb.RouteHandshake{Version: ProtocolVersion, InitiatorId: 42, InitiatorAddr: "127.0.0.1:1", Backend: "tcp",
		Endpoint: []byte("endpoint"), Nonce: backend.Nonce()}
	hs.Mac = handshakeMAC(s, hs)
	if !handshakeVerifies(s, hs) {
		t.Fatal("handshake MAC does not verify")
	}
	for name, change := range map[string]func(h *rdmapb.RouteHandshake){
		"version":   func(h *rdmapb.RouteHandshake) { h.Version++ },
		"initiator": func(h *rdmapb.RouteHandshake) { h.InitiatorId++ },
		"address":   func(h *rdmapb.RouteHandshake) { h.InitiatorAddr += "0" },
		"backend":   func(h *rdmapb.RouteHandshake) { h.Backend = "ibverbs" },
		"endpoint":  func(h *rdmapb.RouteHandshake) { h.Endpoint = append(h.Endpoint, 0) },
		"nonce":     func(h *rdmapb.RouteHandshake) { h.Nonce = backend.Nonce() },
	} {
		h := proto.Clone(hs).(*rdmapb.RouteHandshake)
		change(h)
		if handshakeVerifies(s, h) {
			t.Errorf("handshake with another %s verifies", name)
		}
	}
	r := &rdmapb.RouteHandshakeResponse{Version: ProtocolVersion, ResponderId: 7, Backend: "tcp", Endpoint: []byte("info")}
	r.Mac = replyMAC(s, hs.Nonce, r)
	if !replyVerifies(s, hs.Nonce, r) {
		t.Fatal("reply MAC does not verify")
	}
	if replyVerifies(s, backend.Nonce(), r) {
		t.Error("reply verifies for another handshake's nonce")
	}
	for name, change := range map[string]func(r *rdmapb.RouteHandshakeResponse){
		"version":   func(r *rdmapb.RouteHandshakeResponse) { r.Version++ },
		"responder": func(r *rdmapb.RouteHandshakeResponse) { r.ResponderId++ },
		"backend":   func(r *rdmapb.RouteHandshakeResponse) { r.Backend = "ibverbs" },
		"endpoint":  func(r *rdmapb.RouteHandshakeResponse) { r.Endpoint = nil },
		"error":     func(r *rdmapb.RouteHandshakeResponse) { r.Error = &rdmapb.Error{Code: rdmapb.Code_UNAUTHENTICATED} },
	} {
		c := proto.Clone(r).(*rdmapb.RouteHandshakeResponse)
		change(c)
		if replyVerifies(s, hs.Nonce, c) {
			t.Errorf("reply with another %s verifies", name)
		}
	}
}
