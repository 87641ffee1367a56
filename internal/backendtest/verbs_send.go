package backendtest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// Send and SendWithImm: a message lands in the receive buffer posted
// next, up to its size; too large a message, or none posted, is refused
// on both sides and the posted buffer stays; messages come in posting
// order.

// post posts b at B's inbox.
func (p *VerbsPair) post(t testing.TB, b buffer.Buffer) {
	t.Helper()
	if err := p.Inbox.Post(b); err != nil {
		t.Fatalf("post receive %v: %v", b, err)
	}
}

func testSendLands(t *testing.T, f Factory) {
	p := NewVerbsPair(t, f, 1, 4)
	p.Need(t, backend.OpSend)
	const n = 4096
	ha, la := Alloc(t, p.RegA, n, buffer.AccessReadWrite)
	// The receive buffer is a slice in the middle of a region: the rest
	// of the region is not touched.
	region, lr := Alloc(t, p.RegB, 3*n, buffer.AccessReadWrite)
	rb := Slice(t, region, n, n)
	for _, tc := range []struct {
		name   string
		size   int
		imm    uint32
		hasImm bool
	}{
		{"Send", 1000, 0, false},
		{"SendWithImm", n, 0xDEADBEEF, true}, // exactly the buffer's size
		{"SendWithImmZero", 1, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			Random(t, la)
			Random(t, lr)
			want := bytes.Clone(lr)
			copy(want[n:], la[:tc.size])
			p.post(t, rb)
			if err := p.send(t, p.Route, Slice(t, ha, 0, tc.size), tc.imm, tc.hasImm); err != nil {
				t.Fatalf("send of %d bytes: %v", tc.size, err)
			}
			m := nextMessage(t, p.Inbox, f.Timeout)
			if m.Peer != OwnerA || m.Buffer != Slice(t, rb, 0, tc.size) || m.Imm != tc.imm || m.HasImm != tc.hasImm {
				t.Fatalf("message from %x in %v, imm %#x (%v); want from %x in %v, imm %#x (%v)",
					m.Peer, m.Buffer, m.Imm, m.HasImm, uint64(OwnerA), Slice(t, rb, 0, tc.size), tc.imm, tc.hasImm)
			}
			AssertSame(t, "message bytes", m.Mem, la[:tc.size])
			AssertSame(t, "region of the receive buffer", lr, want)
			if p.Inbox.Posted() != 0 {
				t.Fatalf("%d receive buffers still posted after the message", p.Inbox.Posted())
			}
		})
	}
	if st := p.Route.Stats(); st.Errors != 0 || st.BytesPut != 1000+n+1 {
		t.Errorf("route stats %+v", st)
	}
}

// testSendTooLarge: a message larger than the buffer posted next fails
// with ErrReceiveTooSmall at the sender and at the receiver; the buffer
// stays posted, untouched, and takes the next message that fits.
func testSendTooLarge(t *testing.T, f Factory) {
	p := NewVerbsPair(t, f, 1, 4)
	p.Need(t, backend.OpSend)
	ha, la := Alloc(t, p.RegA, 4096, buffer.AccessReadWrite)
	rb, lr := Alloc(t, p.RegB, 1024, buffer.AccessReadWrite)
	Random(t, la)
	Random(t, lr)
	before := bytes.Clone(lr)
	p.post(t, rb)
	if err := p.send(t, p.Route, ha, 0, false); !errors.Is(err, rdmamgr.ErrReceiveTooSmall) {
		t.Fatalf("send of 4096 bytes into 1024: %v, want ErrReceiveTooSmall", err)
	}
	if _, msgs, last := p.Inbox.Refused(); msgs != 1 || !errors.Is(last, rdmamgr.ErrReceiveTooSmall) {
		t.Fatalf("receiver: %d refusals, last %v; want 1, ErrReceiveTooSmall", msgs, last)
	}
	if p.Inbox.Posted() != 1 {
		t.Fatalf("%d receive buffers posted after the refusal, want 1", p.Inbox.Posted())
	}
	AssertSame(t, "receive buffer after a refused message", lr, before)
	p.afterRefusal(t, p.Route)
	rt := p.NewRoute(t)
	if err := p.send(t, rt, Slice(t, ha, 0, 1024), 3, true); err != nil {
		t.Fatalf("send that fits after the refusal: %v", err)
	}
	if m := nextMessage(t, p.Inbox, f.Timeout); m.Buffer != rb || m.Imm != 3 {
		t.Fatalf("message in %v imm %d, want in %v imm 3", m.Buffer, m.Imm, rb)
	}
	AssertSame(t, "message after the refusal", lr, la[:1024])
}

// testSendNonePosted: a message with no receive buffer posted fails with
// ErrNoReceive on both sides; once one is posted, the next lands.
func testSendNonePosted(t *testing.T, f Factory) {
	p := NewVerbsPair(t, f, 1, 4)
	p.Need(t, backend.OpSend)
	ha, la := Alloc(t, p.RegA, 100, buffer.AccessReadWrite)
	Random(t, la)
	if err := p.send(t, p.Route, ha, 0, false); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("send with nothing posted: %v, want ErrNoReceive", err)
	}
	if _, msgs, last := p.Inbox.Refused(); msgs != 1 || !errors.Is(last, rdmamgr.ErrNoReceive) {
		t.Fatalf("receiver: %d refusals, last %v; want 1, ErrNoReceive", msgs, last)
	}
	p.afterRefusal(t, p.Route)
	rt := p.NewRoute(t)
	rb, lr := Alloc(t, p.RegB, 100, buffer.AccessReadWrite)
	p.post(t, rb)
	if err := p.send(t, rt, ha, 0, false); err != nil {
		t.Fatalf("send once posted: %v", err)
	}
	nextMessage(t, p.Inbox, f.Timeout)
	AssertSame(t, "message", lr, la)
}

// testSendOrder: many messages in flight at once land in the posted
// buffers in posting order.
func testSendOrder(t *testing.T, f Factory) {
	const n, size = 100, 256
	p := NewVerbsPair(t, f, 1, n)
	p.Need(t, backend.OpSend)
	ha, la := Alloc(t, p.RegA, n*size, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n*size, buffer.AccessReadWrite)
	Random(t, la)
	for i := range n {
		p.post(t, Slice(t, hb, i*size, size))
	}
	rec := NewRecorder(n)
	deadline := time.Now().Add(f.Timeout)
	lens := make([]int, n)
	for i := range n {
		lens[i] = 1 + (i*71)%size
		wr, release := VerbWR(t, p.RegA, backend.OpSend, Slice(t, ha, i*size, lens[i]), buffer.Buffer{}, Operands{Imm: uint32(i), HasImm: true}, deadline, rec)
		defer release()
		if err := p.Route.Post(wr); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	for range n {
		if res := rec.Wait(t, f.Timeout); res.Err != nil {
			t.Fatalf("send %d: %v", res.WR.Imm, res.Err)
		}
	}
	for i := range n {
		m := nextMessage(t, p.Inbox, f.Timeout)
		if m.Imm != uint32(i) || m.Buffer != Slice(t, hb, i*size, lens[i]) {
			t.Fatalf("message %d: imm %d in %v (out of posting order)", i, m.Imm, m.Buffer)
		}
		AssertSame(t, "message bytes", lb[i*size:i*size+lens[i]], la[i*size:i*size+lens[i]])
	}
}
