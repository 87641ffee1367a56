//go:build ibverbs

package ibverbs

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// lateInbox is a host agent's inbox (agentapi.AsyncInbox) over the fake
// process's: while hold is set, the next event's answer is handed to the
// test (held) instead of given; Event, the synchronous path, waits for it
// as a slow process keeps its agent waiting.
type lateInbox struct {
	*backendtest.Inbox
	hold atomic.Bool
	held chan func(error)
}

var _ agentapi.AsyncInbox = (*lateInbox)(nil)

func (li *lateInbox) EventAsync(ev backend.Event, answer func(error)) error {
	if li.hold.CompareAndSwap(true, false) {
		li.held <- answer
		return nil
	}
	answer(li.Inbox.Event(ev))
	return nil
}

func (li *lateInbox) Event(ev backend.Event) error {
	if li.hold.CompareAndSwap(true, false) {
		done := make(chan error, 1)
		li.held <- func(err error) { done <- err }
		return <-done
	}
	return li.Inbox.Event(ev)
}

// TestViaLateAnswer: an attached process that is slow to answer its
// event holds up its own operation only: the far agent's worker serves
// the route's next notice (acked while the first waits: acks overtake,
// matched by seq), and the first is acked with the process's answer when
// it comes. Fails on a worker that calls Event synchronously (the second
// put-with-imm misses its deadline).
func TestViaLateAnswer(t *testing.T) {
	p := newAgentPair(t, DefaultConfig())
	li := &lateInbox{Inbox: p.fake.inbox, held: make(chan func(error), 1)}
	p.fake.over.Store(li)
	hA, _ := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	hP, _ := p.fake.region(t, 4096, accessAll)

	li.hold.Store(true)
	rec := backendtest.NewRecorder(1)
	wr, release := backendtest.NewWR(t, p.regA, backend.OpWriteImm, backendtest.Slice(t, hA, 0, 64), backendtest.Slice(t, hP, 0, 64), time.Now().Add(waitTimeout), rec)
	defer release()
	wr.Via, wr.Imm = testVia, 1
	if err := p.rt.Post(wr); err != nil {
		t.Fatal(err)
	}
	var answer func(error)
	select {
	case answer = <-li.held:
	case <-time.After(waitTimeout):
		t.Fatal("the first event never reached the inbox")
	}
	err := p.viaDo(t, p.rt, backend.OpWriteImm, backendtest.Slice(t, hA, 64, 64), backendtest.Slice(t, hP, 64, 64),
		func(wr *backend.WorkRequest) { wr.Imm, wr.Deadline = 2, time.Now().Add(3*time.Second) })
	if err != nil {
		answer(nil)
		t.Fatalf("a put-with-imm behind a process that has not answered: %v", err)
	}
	select {
	case ev := <-p.fake.inbox.Events():
		if ev.Imm != 2 {
			t.Fatalf("event %+v, want the second's", ev)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no event for the second put-with-imm")
	}
	time.Sleep(10 * time.Millisecond)
	rec.None(t) // the first is not answered yet
	answer(fmt.Errorf("slow process: %w", rdmamgr.ErrLimit))
	if res := rec.Wait(t, waitTimeout); !errors.Is(res.Err, rdmamgr.ErrLimit) {
		t.Fatalf("the held put-with-imm: %v, want the process's ErrLimit", res.Err)
	}
	if err := p.viaDo(t, p.rt, backend.OpWriteImm, backendtest.Slice(t, hA, 0, 8), backendtest.Slice(t, hP, 0, 8),
		func(wr *backend.WorkRequest) { wr.Imm = 3 }); err != nil {
		t.Fatalf("the route after the late answer: %v", err)
	}
	if st := p.rt.Stats(); st.InFlight != 0 {
		t.Errorf("route stats %+v", st)
	}
}
