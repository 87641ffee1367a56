package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// PutWithImm: the owner's subscriber gets one event per operation, after
// the bytes, in posting order; refusals (no notify right, no subscriber,
// a full queue) reach the initiator and are counted, nothing is lost.

const accessNotify = buffer.AccessReadWrite | buffer.AccessNotify

// bytesLanded returns an Inbox check: the event's range of hb's memory lb
// holds what want holds at the same place (want mirrors lb's layout).
func bytesLanded(hb buffer.Buffer, lb, want []byte) func(backend.Event) error {
	return func(ev backend.Event) error {
		if ev.Region != hb.Region || ev.Offset < hb.Offset || ev.Offset+ev.Length > hb.Offset+uint64(len(lb)) {
			return fmt.Errorf("event outside the buffer %v", hb)
		}
		off := ev.Offset - hb.Offset
		if i := FirstDiff(lb[off:off+ev.Length], want[off:off+ev.Length]); i >= 0 {
			return fmt.Errorf("event before its bytes: byte %d of %d differs", i, ev.Length)
		}
		return nil
	}
}

// testEventAfterBytes: sizes up to several of TCP's chunks; the inbox
// checks the bytes when the backend hands it the event, the subscriber
// when it takes it.
func testEventAfterBytes(t *testing.T, f Factory) {
	p := NewVerbsPair(t, f, 16, 1)
	p.Need(t, backend.OpWriteImm)
	sizes := []int{1, 7, 4096, 64<<10 + 3, min(3<<20+5, f.MaxSize)}
	total := 0
	for _, n := range sizes {
		total += n + 13
	}
	ha, la := Alloc(t, p.RegA, total, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, total, accessNotify)
	Random(t, la)
	p.Inbox.SetCheck(bytesLanded(hb, lb, la))
	off := 0
	for i, n := range sizes {
		off += 13 // gaps stay untouched
		imm := uint32(0xE0000000 + i)
		if err := p.putImm(t, p.Route, Slice(t, ha, off, n), Slice(t, hb, off, n), imm); err != nil {
			t.Fatalf("put-imm of %d bytes: %v", n, err)
		}
		ev := nextEvent(t, p.Inbox, f.Timeout)
		want := backend.Event{Peer: OwnerA, Region: hb.Region, Offset: hb.Offset + uint64(off), Length: uint64(n), Imm: imm}
		if ev != want {
			t.Fatalf("event %+v, want %+v", ev, want)
		}
		AssertSame(t, fmt.Sprintf("bytes of event %d", i), lb[off:off+n], la[off:off+n])
		off += n
	}
	if err := p.Inbox.Fault(); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-p.Inbox.Events():
		t.Fatalf("an extra event: %+v", ev)
	default:
	}
}

// testEventOrder: many PutWithImm in flight at once; their events come
// in posting order, each after its bytes.
func testEventOrder(t *testing.T, f Factory) {
	const n = 200
	p := NewVerbsPair(t, f, n, 1)
	p.Need(t, backend.OpWriteImm)
	ha, la := Alloc(t, p.RegA, n*512, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n*512, accessNotify)
	Random(t, la)
	p.Inbox.SetCheck(bytesLanded(hb, lb, la))
	rec := NewRecorder(n)
	deadline := time.Now().Add(f.Timeout)
	for i := range n {
		size := 1 + (i*37)%512
		wr, release := VerbWR(t, p.RegA, backend.OpWriteImm, Slice(t, ha, i*512, size), Slice(t, hb, i*512, size), Operands{Imm: uint32(i)}, deadline, rec)
		defer release()
		if err := p.Route.Post(wr); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	for range n {
		if res := rec.Wait(t, f.Timeout); res.Err != nil {
			t.Fatalf("put-imm %d: %v", res.WR.Imm, res.Err)
		}
	}
	for i := range n {
		if ev := nextEvent(t, p.Inbox, f.Timeout); ev.Imm != uint32(i) || ev.Offset != hb.Offset+uint64(i*512) {
			t.Fatalf("event %d: %+v (out of posting order)", i, ev)
		}
	}
	if err := p.Inbox.Fault(); err != nil {
		t.Fatal(err)
	}
}

// testImmNeedsNotify: a PutWithImm needs AccessWrite and AccessNotify;
// without either it is refused, changes nothing and delivers nothing.
func testImmNeedsNotify(t *testing.T, f Factory) {
	p := NewVerbsPair(t, f, 4, 1)
	p.Need(t, backend.OpWriteImm)
	const n = 4096
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	Random(t, la)
	for i, access := range []buffer.Access{buffer.AccessReadWrite, buffer.AccessRead | buffer.AccessNotify} {
		rt := p.Route
		if i > 0 {
			rt = p.NewRoute(t)
		}
		hb, lb := Alloc(t, p.RegB, n, access)
		Random(t, lb)
		before := bytes.Clone(lb)
		err, atPost := p.verbRefused(t, rt, backend.OpWriteImm, ha, hb, Operands{Imm: 1})
		if !errors.Is(err, f.NotifyDeniedErr) {
			t.Fatalf("put-imm to a %s buffer: %v, want %v", access, err, f.NotifyDeniedErr)
		}
		AssertSame(t, "refused buffer", lb, before)
		if len(p.Inbox.Events()) != 0 {
			t.Fatalf("event delivered for a refused put-imm")
		}
		p.afterDenied(t, rt, atPost) // a handle without the right may be refused at Post
	}
}

// testNoReceiver: with no inbox, or with nobody subscribed, a PutWithImm
// fails with ErrNoReceive (its bytes did land) and so does a Send.
func testNoReceiver(t *testing.T, f Factory) {
	const n = 1000
	check := func(t *testing.T, p *Pair, rt backend.Route) {
		ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
		hb, lb := Alloc(t, p.RegB, n, accessNotify)
		Random(t, la)
		if p.carries(backend.OpWriteImm) {
			if err := p.putImm(t, rt, ha, hb, 7); !errors.Is(err, rdmamgr.ErrNoReceive) {
				t.Fatalf("put-imm without a receiver: %v, want ErrNoReceive", err)
			}
			AssertSame(t, "bytes of a put-imm without a receiver", lb, la)
			p.afterRefusal(t, rt)
			rt = p.NewRoute(t)
		}
		if p.carries(backend.OpSend) {
			if err := p.send(t, rt, ha, 0, false); !errors.Is(err, rdmamgr.ErrNoReceive) {
				t.Fatalf("send without a receiver: %v, want ErrNoReceive", err)
			}
			p.afterRefusal(t, rt)
		}
	}
	t.Run("NoInbox", func(t *testing.T) {
		p := NewPair(t, f) // SetInbox never called
		check(t, p, p.Route)
	})
	t.Run("Unsubscribed", func(t *testing.T) {
		p := NewVerbsPair(t, f, 4, 4)
		p.Inbox.StopEvents()
		p.Inbox.StopMessages()
		hb, _ := Alloc(t, p.RegB, n, buffer.AccessReadWrite)
		if err := p.Inbox.Post(hb); err != nil {
			t.Fatal(err)
		}
		check(t, p.Pair, p.Route)
		ev, msg, last := p.Inbox.Refused()
		if (p.carries(backend.OpWriteImm) && ev != 1) || (p.carries(backend.OpSend) && msg != 1) || !errors.Is(last, rdmamgr.ErrNoReceive) {
			t.Fatalf("refusals: %d events, %d messages, last %v", ev, msg, last)
		}
		if p.Inbox.Posted() != 1 {
			t.Fatalf("%d receive buffers posted, want the one still there", p.Inbox.Posted())
		}
	})
}

// carries reports whether A's routes carry op.
func (p *Pair) carries(op backend.Op) bool {
	c, ok := p.A.(backend.Capabilities)
	return !ok || c.Supports(op)
}
