package tcp

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

func mustSecret(t *testing.T, s string) backend.Secret {
	t.Helper()
	sec, err := backend.NewSecret([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

func TestSecretRouteWorks(t *testing.T) {
	s := mustSecret(t, "correct horse battery staple")
	p := newPair(t, Config{Secret: s}, Config{Secret: s})
	backendtest.CheckRoute(t, waitTimeout, p.route, p.regA, p.regB)
	if f := p.b.Served().AuthFail; f != 0 {
		t.Fatalf("AuthFail = %d", f)
	}
}

func TestSecretMismatchRefused(t *testing.T) {
	a, _ := newBackend(t, Config{Secret: mustSecret(t, "the initiator's secret!!")}, backendtest.OwnerA)
	b, regB := newBackend(t, Config{Secret: mustSecret(t, "the responder's secret!!")}, backendtest.OwnerB)
	before, _ := backendtest.Alloc(t, regB, 64, buffer.AccessReadWrite)
	mem, _ := regB.Bytes(before)
	want := bytes.Clone(mem)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pending, info, err := a.PrepareRoute(ctx, backendtest.OwnerB)
	if err != nil {
		t.Fatal(err)
	}
	answer, err := b.AcceptRoute(ctx, backendtest.OwnerA, info)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pending.Complete(ctx, answer); !errors.Is(err, rdmamgr.ErrUnauthenticated) {
		t.Fatalf("Complete with the wrong secret: %v, want ErrUnauthenticated", err)
	}
	if got := b.Served().AuthFail; got == 0 {
		t.Fatal("AuthFail not counted")
	}
	backendtest.AssertSame(t, "owner memory", mem, want)
}

// A hello without the secret's MAC (as a peer without the secret, holding
// a stolen token, would send) is refused before any frame is read.
func TestSecretHelloWithoutMAC(t *testing.T) {
	s := mustSecret(t, "correct horse battery staple")
	p := newPair(t, Config{Secret: s}, Config{Secret: s})
	c := dialRaw(t, p.b)
	if code := sendHello(t, c, routeToken(t, p.b)); code != rdmapb.Code_UNAUTHENTICATED {
		t.Fatalf("hello without MAC: %v, want UNAUTHENTICATED", code)
	}
	expectClosed(t, c)
	p.checkServes(t)
}
