package actor

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// PutWithImm, Send and the atomics end to end: a queue pair of manager a
// to manager b over TCP, b's inbox (SubscribeEvents, SubscribeMessages,
// PostRecv) and b's memory.

func recvEvent(t *testing.T, e *Events) backend.Event {
	t.Helper()
	select {
	case ev, ok := <-e.C:
		if !ok {
			t.Fatal("event subscription closed")
		}
		return ev
	case <-time.After(testTimeout):
		t.Fatal("no event")
		return backend.Event{}
	}
}

func recvMessage(t *testing.T, s *Messages) Message {
	t.Helper()
	select {
	case m, ok := <-s.C:
		if !ok {
			t.Fatal("message subscription closed")
		}
		return m
	case <-time.After(testTimeout):
		t.Fatal("no message")
		return Message{}
	}
}

func slice(t *testing.T, b buffer.Buffer, off, n uint64) buffer.Buffer {
	t.Helper()
	s, err := b.Slice(off, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPutWithImmEvents(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	events, err := b.SubscribeEvents(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SubscribeEvents(2); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("second event subscriber: %v, want ErrLimit", err)
	}
	const n = 64<<10 + 5
	local := requestBuf(t, ctx, a.Client(), n, buffer.AccessReadWrite)
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), n, buffer.AccessReadWrite|buffer.AccessNotify)
	qp := requestQP(t, ctx, a, b.PID())
	src, dst := mustBytes(t, a, local), mustBytes(t, b, remote)
	crand.Read(src)
	if err := qp.PutWithImm(ctx, local, remote, 42).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	ev := recvEvent(t, events)
	if want := (backend.Event{Peer: a.ID(), Region: remote.Region, Offset: remote.Offset, Length: n, Imm: 42}); ev != want {
		t.Fatalf("event %+v, want %+v", ev, want)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("bytes of the event differ")
	}

	// A full queue refuses (the bytes land) and counts; nothing is lost.
	refused := b.InboxRefused()
	for i := range 3 {
		err := qp.PutWithImm(ctx, local, remote, uint32(i)).Wait(ctx)
		if (i < 2 && err != nil) || (i == 2 && !errors.Is(err, rdmamgr.ErrLimit)) {
			t.Fatalf("put-imm %d into a queue of 2: %v", i, err)
		}
	}
	if got := b.InboxRefused(); got != refused+1 {
		t.Fatalf("InboxRefused %d, want %d", got, refused+1)
	}
	for i := range 2 {
		if ev := recvEvent(t, events); ev.Imm != uint32(i) {
			t.Fatalf("event %d: imm %d", i, ev.Imm)
		}
	}

	// Unsubscribed: refused with ErrNoReceive, its bytes land all the same.
	unsubscribed(t, ctx, b, events, qp, local, remote, src, dst)
}

// unsubscribed closes events and checks PutWithImm without a subscriber,
// then with a new one.
func unsubscribed(t *testing.T, ctx context.Context, b *Manager, events *Events, qp *queuepair.QueuePair, local, remote buffer.Buffer, src, dst []byte) {
	t.Helper()
	refused := b.InboxRefused()
	events.Close()
	events.Close()
	if _, ok := <-events.C; ok {
		t.Fatal("event channel open after Close")
	}
	crand.Read(src)
	if err := qp.PutWithImm(ctx, local, remote, 9).Wait(ctx); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("put-imm without a subscriber: %v, want ErrNoReceive", err)
	}
	if !bytes.Equal(src, dst) || b.InboxRefused() != refused+1 {
		t.Fatalf("refused put-imm: bytes landed %v, refused %d", bytes.Equal(src, dst), b.InboxRefused())
	}
	again, err := b.SubscribeEvents(1)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := qp.PutWithImm(ctx, local, remote, 10).Wait(ctx); err != nil || recvEvent(t, again).Imm != 10 {
		t.Fatalf("put-imm to a new subscriber: %v", err)
	}
}

func TestSendRecvMessages(t *testing.T) {
	_, a, b := newPair(t)
	ctx := testCtx(t)
	msgs, err := b.SubscribeMessages(4)
	if err != nil {
		t.Fatal(err)
	}
	defer msgs.Close()
	local := requestBuf(t, ctx, a.Client(), 4096, buffer.AccessReadWrite)
	src := mustBytes(t, a, local)
	crand.Read(src)
	rb := requestBuf(t, ctx, b.Client(), 4096, buffer.AccessReadWrite)
	qp := requestQP(t, ctx, a, b.PID())
	post := func(buf buffer.Buffer) {
		t.Helper()
		if err := b.PostRecv(buf); err != nil {
			t.Fatal(err)
		}
	}

	post(rb)
	if err := qp.Send(ctx, slice(t, local, 0, 1000)).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	m := recvMessage(t, msgs)
	if m.Peer != a.ID() || m.Buffer != slice(t, rb, 0, 1000) || m.Length != 1000 || m.HasImm || m.Err != nil {
		t.Fatalf("message %+v", m)
	}
	if got := mustBytes(t, b, m.Buffer); !bytes.Equal(got, src[:1000]) {
		t.Fatal("message bytes differ")
	}
	post(rb)
	if err := qp.SendWithImm(ctx, local, 7).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if m := recvMessage(t, msgs); m.Buffer != rb || m.Imm != 7 || !m.HasImm {
		t.Fatalf("message with imm %+v", m)
	}

	sendRefusals(t, ctx, b, msgs, qp, a.ID(), local, rb)
}

// sendRefusals: too large a message, or none posted, is refused on both
// sides (the buffer stays posted); closing the subscription gives the
// posted buffers back.
func sendRefusals(t *testing.T, ctx context.Context, b *Manager, msgs *Messages, qp *queuepair.QueuePair, from uint64, local, rb buffer.Buffer) {
	t.Helper()
	post := func(buf buffer.Buffer) {
		t.Helper()
		if err := b.PostRecv(buf); err != nil {
			t.Fatal(err)
		}
	}
	small := slice(t, rb, 0, 1024)
	post(small)
	if err := qp.Send(ctx, local).Wait(ctx); !errors.Is(err, rdmamgr.ErrReceiveTooSmall) {
		t.Fatalf("send of 4096 into 1024: %v, want ErrReceiveTooSmall", err)
	}
	if m := recvMessage(t, msgs); !errors.Is(m.Err, rdmamgr.ErrReceiveTooSmall) || m.Peer != from || m.Length != 4096 {
		t.Fatalf("receiver's refusal %+v", m)
	}
	if err := qp.Send(ctx, slice(t, local, 0, 1024)).Wait(ctx); err != nil {
		t.Fatalf("send that fits the buffer still posted: %v", err)
	}
	if m := recvMessage(t, msgs); m.Buffer != small {
		t.Fatalf("message %+v, want in %v", m, small)
	}

	// None posted: refused on both sides.
	if err := qp.Send(ctx, local).Wait(ctx); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("send with nothing posted: %v, want ErrNoReceive", err)
	}
	if m := recvMessage(t, msgs); !errors.Is(m.Err, rdmamgr.ErrNoReceive) {
		t.Fatalf("receiver's refusal %+v", m)
	}

	// Closing the subscription gives the posted buffers back.
	post(rb)
	msgs.Close()
	if err := b.PostRecv(rb); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("post without a subscriber: %v, want ErrNoReceive", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := b.Client().ReleaseBuffer(rctx, rb); err != nil {
		t.Fatalf("release of a buffer posted to a closed subscription: %v", err)
	}
}
