package tcp

import (
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// lateInbox is an agent's inbox that answers later: it holds each
// event's answer until the test gives it.
type lateInbox struct {
	backend.Inbox
	answers chan func(error)
}

func (in *lateInbox) EventAsync(ev backend.Event, answer func(error)) error {
	if ev.Imm == 0xBAD {
		return rdmamgr.ErrLimit // a full queue: refused at once
	}
	in.answers <- answer
	return nil
}

var _ agentapi.AsyncInbox = (*lateInbox)(nil)

// lateAgent is the fake agent whose process's inbox answers later.
type lateAgent struct {
	*fakeAgent
	in *lateInbox
}

func (l lateAgent) Inbox(via uint16) (backend.Inbox, error) {
	if _, err := l.fakeAgent.Inbox(via); err != nil {
		return nil, err
	}
	return l.in, nil
}

// TestViaLateAnswers: an event an agent's inbox answers later holds up
// nothing else on the connection: a WRITE and another write-imm posted
// after it on the same connection are answered first; each write-imm
// completes with its own late answer (a refusal too), also when it comes
// while the server waits for the next request; one refused at once is
// answered at once.
func TestViaLateAnswers(t *testing.T) {
	t.Run("Plain", func(t *testing.T) { testViaLateAnswers(t, Config{ConnsPerRoute: 1}, Config{}) })
	t.Run("TLS", func(t *testing.T) { // a wake of a TLS read: it reads on
		cr := tlsCreds(t)
		testViaLateAnswers(t, Config{ConnsPerRoute: 1, ServerTLS: cr.Server, ClientTLS: cr.Client}, Config{ServerTLS: cr.Server, ClientTLS: cr.Client})
	})
}

func testViaLateAnswers(t *testing.T, cfgA, cfgB Config) {
	p := newAgentPair(t, cfgA, cfgB, 4096)
	in := &lateInbox{answers: make(chan func(error), 4)}
	if !setResolver(p.b, lateAgent{fakeAgent: p.fake, in: in}) {
		t.Fatal("SetResolver")
	}
	_, local := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, local)
	imm := func(v uint32) (*backend.WorkRequest, *backendtest.Recorder) {
		wr := viaWR(backend.OpWriteImm, local[:64], backendtest.Slice(t, p.procH, 0, 64))
		wr.Imm = v
		rec := backendtest.NewRecorder(1)
		wr.Done = rec
		if err := p.route.Post(wr); err != nil {
			t.Fatal(err)
		}
		return wr, rec
	}
	waitErr := func(rec *backendtest.Recorder) error { return rec.Wait(t, waitTimeout).Err }
	_, first := imm(1)
	answer1 := <-in.answers // the server handed the event on and serves on
	put := viaWR(backend.OpWrite, local[:128], backendtest.Slice(t, p.procH, 1024, 128))
	if err := backendtest.DoWR(t, waitTimeout, p.route, put); err != nil {
		t.Fatalf("put behind an unanswered event: %v", err)
	}
	_, second := imm(2)
	answer2 := <-in.answers
	_, refused := imm(0xBAD)
	if err := waitErr(refused); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("event refused at once: %v, want ErrLimit", err)
	}
	first.None(t)                 // not completed before its answer
	answer2(rdmamgr.ErrNoReceive) // out of order, a refusal
	if err := waitErr(second); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("event 2: %v, want its answer ErrNoReceive", err)
	}
	time.Sleep(20 * time.Millisecond) // the server waits for a request: the answer wakes it
	answer1(nil)
	if err := waitErr(first); err != nil {
		t.Fatalf("event 1: %v", err)
	}
	for i := range 3 { // more wakes, each then a frame read whole
		_, rec := imm(uint32(10 + i))
		answer := <-in.answers
		time.Sleep(5 * time.Millisecond)
		answer(nil)
		if err := waitErr(rec); err != nil {
			t.Fatalf("event %d: %v", 10+i, err)
		}
		if err := backendtest.DoWR(t, waitTimeout, p.route, viaWR(backend.OpWrite, local[:128], backendtest.Slice(t, p.procH, 1024, 128))); err != nil {
			t.Fatalf("put after a wake: %v", err)
		}
	}
	backendtest.AssertSame(t, "process memory", p.procMem[1024:1152], local[:128])
	assertUp(t, p.route)
}
