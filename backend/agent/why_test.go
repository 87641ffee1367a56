//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// routeWithin is routeTo with the initiator's Complete bounded by d.
func routeWithin(t *testing.T, p, q *proc, d time.Duration) (backend.Route, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	pr, info, err := p.b.PrepareRoute(ctx, 0)
	if err != nil {
		return nil, err
	}
	ans, err := q.b.AcceptRoute(ctx, p.id, info)
	if err != nil {
		pr.Abort()
		return nil, err
	}
	r, err := pr.Complete(ctx, ans)
	if err == nil {
		t.Cleanup(func() { r.Close() })
	}
	return r, err
}

// The route's reason says which backend the agents' route runs on, as
// our agent answers the ask at setup: tcp, ibverbs, or "backend unknown
// yet" when it does not answer in time.
func TestViaSaysBackend(t *testing.T) {
	x := newPair(t)
	want := fmt.Sprintf("via host agent (slot %d at agent agent-b:1) over tcp", x.p2.waitAttached(t).w.Slot)
	if v := x.route(t).(*route).Via(); v != want {
		t.Fatalf("Via() = %q, want %q", v, want)
	}
	for _, c := range []struct {
		answer func(q agentwire.Ask) []byte
		suffix string
	}{
		{func(q agentwire.Ask) []byte {
			p, _ := (&agentwire.Answer{ID: q.ID, Backend: agentwire.AnswerIBVerbs}).Encode()
			return p
		}, ") over ibverbs"},
		{func(q agentwire.Ask) []byte {
			p, _ := (&agentwire.Answer{ID: q.ID, Backend: agentwire.AnswerUnknown}).Encode()
			return p
		}, "), backend unknown yet"},
		{func(q agentwire.Ask) []byte { // another ask's: dropped
			p, _ := (&agentwire.Answer{ID: q.ID + 100, Backend: agentwire.AnswerTCP}).Encode()
			return p
		}, "), backend unknown yet"},
		{func(agentwire.Ask) []byte { return nil }, "), backend unknown yet"},
	} {
		x.a.mu.Lock()
		x.a.answer = c.answer
		x.a.mu.Unlock()
		r, err := routeWithin(t, x.p1, x.p2, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if v := r.(*route).Via(); !strings.HasSuffix(v, c.suffix) {
			t.Fatalf("Via() = %q, want it to end in %q", v, c.suffix)
		}
	}
	x.a.mu.Lock()
	asked := x.a.asked
	x.a.mu.Unlock()
	if asked != 5 {
		t.Fatalf("%d asks, want 5", asked)
	}
}

// An answer naming a backend the protocol does not define is the agent's
// protocol error: the attachment ends, and the route is not set up on it.
func TestHostileAnswer(t *testing.T) {
	x := newPair(t)
	x.a.mu.Lock()
	x.a.answer = func(q agentwire.Ask) []byte {
		return []byte{agentwire.TypeAnswer, byte(q.ID), byte(q.ID >> 8), byte(q.ID >> 16), byte(q.ID >> 24), 7}
	}
	x.a.mu.Unlock()
	if _, err := routeTo(t, x.p1, x.p2); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("route over a hostile answer: %v", err)
	}
}

// An agent older than asks (agentwire version 2) refuses our version 3:
// we attach again speaking 2, never ask, and the reason is today's.
func TestOldAgentKeepsWhy(t *testing.T) {
	w := newWorld()
	sa, sb := sockPath(t, "a.sock"), sockPath(t, "b.sock")
	a := startFake(t, w, sa, "agent-a:1", 1, backend.Secret{})
	a.mu.Lock()
	a.old = true
	a.mu.Unlock()
	startFake(t, w, sb, "agent-b:1", 2, backend.Secret{})
	p1 := newProc(t, w, 0x1111, sa, backend.Secret{}, nil)
	p2 := newProc(t, w, 0x2222, sb, backend.Secret{}, nil)
	if v := p1.waitAttached(t).version; v != agentwire.MinVersion {
		t.Fatalf("attached to an old agent speaking version %d", v)
	}
	want := fmt.Sprintf("via host agent (slot %d at agent agent-b:1)", p2.waitAttached(t).w.Slot)
	r, err := routeTo(t, p1, p2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if v := r.(*route).Via(); v != want {
		t.Fatalf("Via() = %q, want %q", v, want)
	}
	a.mu.Lock()
	asked := a.asked
	a.mu.Unlock()
	if asked != 0 {
		t.Fatalf("an old agent was asked %d times", asked)
	}
}
