package actor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// A landing in progress when its message subscription ends belongs to
// nobody: when it is done its buffer is let go, nothing reaches a new
// subscription, and the new one's queue is all its own (a landing of the
// old one reserved no slot in it).
func TestLandingOutlivesSubscription(t *testing.T) {
	m := startManager(t, newSystem(t), Config{Name: "m"})
	ctx := testCtx(t)
	old, err := m.SubscribeMessages(2)
	if err != nil {
		t.Fatal(err)
	}
	bufs := make([]buffer.Buffer, 3)
	for i := range bufs {
		bufs[i] = requestBuf(t, ctx, m.Client(), 64, buffer.AccessReadWrite)
	}
	for _, b := range bufs[:2] {
		if err := m.PostRecv(b); err != nil {
			t.Fatal(err)
		}
	}
	l1, err1 := m.inbox.Recv(7, 10)
	l2, err2 := m.inbox.Recv(7, 10)
	if err1 != nil || err2 != nil {
		t.Fatalf("recv: %v, %v", err1, err2)
	}
	old.Close()
	cur, err := m.SubscribeMessages(1)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l1.Done(10, 1, true, nil)
		l2.Done(0, 0, false, errors.New("cut short"))
	}()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("landing of an ended subscription blocked")
	}
	if len(cur.C) != 0 {
		t.Fatalf("a message of the ended subscription reached the new one: %+v", <-cur.C)
	}
	if err := m.PostRecv(bufs[2]); err != nil {
		t.Fatal(err)
	}
	l3, err := m.inbox.Recv(7, 10)
	if err != nil {
		t.Fatalf("recv on the new subscription: %v", err)
	}
	l3.Done(10, 3, true, nil)
	if msg := <-cur.C; msg.Imm != 3 || msg.Buffer.Region != bufs[2].Region {
		t.Fatalf("message %+v", msg)
	}
	// Every buffer was let go: releasing them does not wait.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, b := range bufs {
		if err := m.reg.Release(rctx, b); err != nil {
			t.Fatalf("release %v: %v", b, err)
		}
	}
}

// A peer whose messages stall mid-payload holds at most maxLandingsPerPeer
// receive buffers: its next message is refused with ErrLimit, another
// peer's lands, and the peer gets buffers again as its landings end.
func TestLandingsPerPeerCapped(t *testing.T) {
	m := startManager(t, newSystem(t), Config{Name: "m"})
	ctx := testCtx(t)
	msgs, err := m.SubscribeMessages(16)
	if err != nil {
		t.Fatal(err)
	}
	defer msgs.Close()
	for range maxLandingsPerPeer + 2 {
		if err := m.PostRecv(requestBuf(t, ctx, m.Client(), 64, buffer.AccessReadWrite)); err != nil {
			t.Fatal(err)
		}
	}
	var stalled []backend.Landing
	for i := range maxLandingsPerPeer {
		l, err := m.inbox.Recv(7, 10)
		if err != nil {
			t.Fatalf("landing %d of peer 7: %v", i, err)
		}
		stalled = append(stalled, l)
	}
	if _, err := m.inbox.Recv(7, 10); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("landing past the per-peer cap: %v, want ErrLimit", err)
	}
	other, err := m.inbox.Recv(8, 10)
	if err != nil {
		t.Fatalf("another peer's message while peer 7 stalls: %v", err)
	}
	other.Done(10, 0, false, nil)
	if msg := <-msgs.C; msg.Peer != 8 || msg.Err != nil {
		t.Fatalf("message %+v", msg)
	}
	stalled[0].Done(0, 0, false, errors.New("deadline"))
	l, err := m.inbox.Recv(7, 10)
	if err != nil {
		t.Fatalf("peer 7 after one of its landings ended: %v", err)
	}
	l.Done(10, 0, false, nil)
	stalled[1].Done(10, 0, false, nil)
}
