//go:build ibverbs

package ibverbs

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// testInbox is a backend.Inbox for the tests: bounded queues of events
// and messages (nil: nobody subscribed) and a list of receive buffers. An
// event carries a copy of its bytes taken when the backend delivered it,
// so a test sees whether they were in place by then.
type testInbox struct {
	reg *memreg.Registry

	mu     sync.Mutex     // guards the fields below
	events chan evSnap    // nil: no event subscriber
	msgs   chan testMsg   // nil: no message subscriber
	posted []*testLanding // receive buffers, in order
}

type evSnap struct {
	ev    backend.Event
	bytes []byte // the event's range when it was delivered
}

type testMsg struct {
	peer   uint64
	data   []byte
	imm    uint32
	hasImm bool
}

func newTestInbox(reg *memreg.Registry, events, msgs int) *testInbox {
	in := &testInbox{reg: reg}
	if events > 0 {
		in.events = make(chan evSnap, events)
	}
	if msgs > 0 {
		in.msgs = make(chan testMsg, msgs)
	}
	return in
}

func (in *testInbox) Event(ev backend.Event) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.events == nil {
		return fmt.Errorf("test inbox: no subscriber: %w", rdmamgr.ErrNoReceive)
	}
	var snap []byte
	for _, r := range in.reg.Regions() {
		if r.ID() == ev.Region {
			snap = append([]byte(nil), r.Mem()[ev.Offset:ev.Offset+ev.Length]...)
		}
	}
	select {
	case in.events <- evSnap{ev, snap}:
		return nil
	default:
		return fmt.Errorf("test inbox: queue full: %w", rdmamgr.ErrLimit)
	}
}

func (in *testInbox) Recv(peer uint64, n uint64) (backend.Landing, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.msgs == nil:
		return nil, fmt.Errorf("test inbox: no subscriber: %w", rdmamgr.ErrNoReceive)
	case len(in.posted) == 0:
		return nil, fmt.Errorf("test inbox: none posted: %w", rdmamgr.ErrNoReceive)
	case uint64(len(in.posted[0].mem)) < n:
		return nil, fmt.Errorf("test inbox: %d bytes into %d: %w", n, len(in.posted[0].mem), rdmamgr.ErrReceiveTooSmall)
	}
	l := in.posted[0]
	in.posted = in.posted[1:]
	l.peer = peer
	return l, nil
}

// post posts a receive buffer of n bytes.
func (in *testInbox) post(n int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.posted = append(in.posted, &testLanding{in: in, mem: make([]byte, n)})
}

// nPosted returns the receive buffers still posted.
func (in *testInbox) nPosted() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.posted)
}

type testLanding struct {
	in   *testInbox
	mem  []byte
	peer uint64
	done bool
}

func (l *testLanding) Mem() []byte { return l.mem }

func (l *testLanding) Done(n int, imm uint32, hasImm bool, err error) {
	in := l.in
	in.mu.Lock()
	defer in.mu.Unlock()
	if l.done {
		panic("Landing.Done twice")
	}
	if err != nil {
		in.posted = append([]*testLanding{l}, in.posted...)
		return
	}
	l.done = true
	in.msgs <- testMsg{peer: l.peer, data: append([]byte(nil), l.mem[:n]...), imm: imm, hasImm: hasImm}
}

// nextEvent returns the next event, failing the test if none comes.
func (in *testInbox) nextEvent(t testing.TB) evSnap {
	t.Helper()
	select {
	case e := <-in.events:
		return e
	case <-time.After(waitTimeout):
		t.Fatal("no event")
		return evSnap{}
	}
}

// noEvent asserts that no event is queued.
func (in *testInbox) noEvent(t testing.TB) {
	t.Helper()
	select {
	case e := <-in.events:
		t.Fatalf("unexpected event %+v", e.ev)
	default:
	}
}
