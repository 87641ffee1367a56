package backendtest

import (
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// The verbs beyond Put and Get (Factory.Verbs): PutWithImm and its event
// (verbs_events.go), Send and SendWithImm into posted receive buffers
// (verbs_send.go), CompareAndSwap and FetchAdd (verbs_atomic.go). B's
// side is an Inbox (inbox.go) set before any route, as a manager does.

// RunVerbs runs the verbs suite alone (Run does when Factory.Verbs is
// set), e.g. for a backend configured another way.
func RunVerbs(t *testing.T, f Factory) {
	f = f.withDefaults(t)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"EventAfterBytes", testEventAfterBytes},
		{"EventOrder", testEventOrder},
		{"OrderAfterPuts", testOrderAfterPuts},       // order.go
		{"OrderAfterAtomics", testOrderAfterAtomics}, // order.go
		{"ImmNeedsNotify", testImmNeedsNotify},
		{"NoReceiver", testNoReceiver},
		{"EventFlood", testEventFlood},
		{"SendLands", testSendLands},
		{"SendTooLarge", testSendTooLarge},
		{"SendNonePosted", testSendNonePosted},
		{"SendOrder", testSendOrder},
		{"CompareAndSwap", testCompareAndSwap},
		{"FetchAddConcurrent", testFetchAddConcurrent},
		{"AtomicMisaligned", testAtomicMisaligned},
		{"AtomicNeedsAccess", testAtomicNeedsAccess},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}

// VerbsPair is a Pair whose B delivers events and messages to Inbox,
// set (SetInbox) before the route was made.
type VerbsPair struct {
	*Pair
	Inbox *Inbox
}

// NewVerbsPair builds A and B, gives B an Inbox with queues of events and
// messages, and connects a route from A to B; everything is closed at the
// end of the test, which fails if the Inbox saw a fault.
func NewVerbsPair(t testing.TB, f Factory, events, messages int) *VerbsPair {
	t.Helper()
	p := &Pair{f: f}
	p.A, p.RegA = f.NewBackend(t, OwnerA)
	CloseAtCleanup(t, f.Timeout, p.A, p.RegA)
	p.B, p.RegB = f.NewBackend(t, OwnerB)
	CloseAtCleanup(t, f.Timeout, p.B, p.RegB)
	u, ok := p.B.(backend.InboxUser)
	if !ok {
		t.Fatalf("the %s backend is no backend.InboxUser", p.B.Kind())
	}
	in := NewInbox(p.RegB, events, messages)
	u.SetInbox(in)
	t.Cleanup(func() {
		if err := in.Fault(); err != nil {
			t.Errorf("inbox: %v", err)
		}
		in.Close()
	})
	p.Route = p.NewRoute(t)
	return &VerbsPair{Pair: p, Inbox: in}
}

// Need skips the test unless A's routes carry every op of ops.
func (p *Pair) Need(t testing.TB, ops ...backend.Op) {
	t.Helper()
	c, ok := p.A.(backend.Capabilities)
	if !ok {
		return
	}
	for _, op := range ops {
		if !c.Supports(op) {
			t.Skipf("the %s backend does not carry %s here", p.A.Kind(), op)
		}
	}
}

// afterRefusal checks, after the owner's inbox refused an operation
// (no receiver, a full queue, too small a buffer), that the route is
// still up where routes survive refusals, and that the backends serve.
func (p *Pair) afterRefusal(t *testing.T, rt backend.Route) {
	t.Helper()
	if p.f.RouteSurvivesRemoteError {
		select {
		case <-rt.Done():
			t.Fatalf("route failed after a refusal: %v", rt.Err())
		default:
		}
	}
	p.checkWorks(t)
}

// Operands are what a work request carries beyond its buffers.
type Operands struct {
	Imm           uint32
	HasImm        bool
	Compare, Swap uint64
}

// VerbWR returns a work request of op from local (a handle of reg,
// resolved; zero for an atomic, which has no local memory) to remote
// (zero for a send) with o; release drops the local reference.
func VerbWR(t testing.TB, reg *memreg.Registry, op backend.Op, local, remote buffer.Buffer, o Operands, deadline time.Time, done backend.Completer) (wr *backend.WorkRequest, release func()) {
	t.Helper()
	if op.Atomic() {
		wr, release = &backend.WorkRequest{Op: op, Remote: remote, Deadline: deadline, Done: done}, func() {}
	} else {
		wr, release = NewWR(t, reg, op, local, remote, deadline, done)
	}
	wr.Imm, wr.HasImm, wr.Compare, wr.Swap = o.Imm, o.HasImm, o.Compare, o.Swap
	return wr, release
}

// DoVerb posts one operation of op (VerbWR) on rt and returns Post's
// error or the completion's, and an atomic's old value.
func DoVerb(t testing.TB, timeout time.Duration, rt backend.Route, reg *memreg.Registry, op backend.Op, local, remote buffer.Buffer, o Operands) (uint64, error) {
	t.Helper()
	wr, release := VerbWR(t, reg, op, local, remote, o, time.Now().Add(timeout), nil)
	defer release()
	err := DoWR(t, timeout, rt, wr)
	return wr.Result, err
}

// verbRefused runs op like DoVerb and returns its error and whether Post
// itself refused it (nothing reached the peer).
func (p *Pair) verbRefused(t testing.TB, rt backend.Route, op backend.Op, local, remote buffer.Buffer, o Operands) (err error, atPost bool) {
	t.Helper()
	wr, release := VerbWR(t, p.RegA, op, local, remote, o, time.Now().Add(p.f.Timeout), nil)
	defer release()
	rec := NewRecorder(1)
	wr.Done = rec
	if err := rt.Post(wr); err != nil {
		rec.None(t)
		return err, true
	}
	return rec.Wait(t, p.f.Timeout+10*time.Second).Err, false
}

// afterDenied is afterRemoteError for an operation the peer refused,
// unless the backend refused it at Post (then the route must still work).
func (p *Pair) afterDenied(t *testing.T, rt backend.Route, atPost bool) {
	t.Helper()
	if atPost {
		CheckRoute(t, p.f.Timeout, rt, p.RegA, p.RegB)
		return
	}
	p.afterRemoteError(t, rt)
}

// putImm is a PutWithImm from A's local to B's remote on rt.
func (p *Pair) putImm(t testing.TB, rt backend.Route, local, remote buffer.Buffer, imm uint32) error {
	t.Helper()
	_, err := DoVerb(t, p.f.Timeout, rt, p.RegA, backend.OpWriteImm, local, remote, Operands{Imm: imm})
	return err
}

// send is a Send (SendWithImm with hasImm) of A's local on rt.
func (p *Pair) send(t testing.TB, rt backend.Route, local buffer.Buffer, imm uint32, hasImm bool) error {
	t.Helper()
	_, err := DoVerb(t, p.f.Timeout, rt, p.RegA, backend.OpSend, local, buffer.Buffer{}, Operands{Imm: imm, HasImm: hasImm})
	return err
}

// atomic runs op on B's word remote on rt and returns its old value.
func (p *Pair) atomic(t testing.TB, rt backend.Route, op backend.Op, remote buffer.Buffer, compare, swap uint64) (uint64, error) {
	t.Helper()
	return DoVerb(t, p.f.Timeout, rt, p.RegA, op, buffer.Buffer{}, remote, Operands{Compare: compare, Swap: swap})
}

// nextEvent returns the next event of in, failing the test if none
// comes within timeout.
func nextEvent(t testing.TB, in *Inbox, timeout time.Duration) backend.Event {
	t.Helper()
	select {
	case ev := <-in.Events():
		return ev
	case <-time.After(timeout):
		t.Fatalf("no event within %v", timeout)
		return backend.Event{}
	}
}

// nextMessage returns the next message of in (as nextEvent).
func nextMessage(t testing.TB, in *Inbox, timeout time.Duration) Message {
	t.Helper()
	select {
	case m := <-in.Messages():
		return m
	case <-time.After(timeout):
		t.Fatalf("no message within %v", timeout)
		return Message{}
	}
}
