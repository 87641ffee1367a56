package backendtest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// testEventFlood: far more PutWithImm than the subscriber's queue holds.
// Each operation either had its event delivered or failed with ErrLimit
// (its bytes landed either way); the refusals are counted; no event is
// lost or invented. First with a subscriber that takes nothing until
// the flood is over (exactly a queue's worth gets through), then with
// one that drains slowly.
func testEventFlood(t *testing.T, f Factory) {
	const queue = 4
	p := NewVerbsPair(t, f, queue, 1)
	p.Need(t, backend.OpWriteImm)
	t.Run("Stalled", func(t *testing.T) {
		ok := p.flood(t, 64)
		if len(ok) != queue {
			t.Fatalf("%d of 64 events delivered to a stalled queue of %d", len(ok), queue)
		}
		for range len(ok) {
			ev := nextEvent(t, p.Inbox, f.Timeout)
			if !ok[ev.Imm] {
				t.Fatalf("event %d of an operation that failed or was never posted (or twice)", ev.Imm)
			}
			delete(ok, ev.Imm)
		}
	})
	t.Run("Slow", func(t *testing.T) {
		seen := make(chan uint32, 400)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case ev := <-p.Inbox.Events():
					seen <- ev.Imm
					time.Sleep(20 * time.Microsecond) // a slow subscriber
				case <-stop:
					return
				}
			}
		})
		ok := p.flood(t, 400)
		for range len(ok) {
			select {
			case imm := <-seen:
				if !ok[imm] {
					t.Errorf("event %d of an operation that failed or was never posted (or twice)", imm)
				}
				delete(ok, imm)
			case <-time.After(f.Timeout):
				t.Fatalf("%d events of successful operations never came", len(ok))
			}
		}
		close(stop)
		wg.Wait()
		if len(seen) != 0 || len(p.Inbox.Events()) != 0 {
			t.Fatalf("%d more events than successful operations", len(seen)+len(p.Inbox.Events()))
		}
	})
	if err := p.Inbox.Fault(); err != nil {
		t.Fatal(err)
	}
	p.afterRefusal(t, p.Route)
}

// flood posts n PutWithImm at once (imm = index) into disjoint ranges,
// waits for all and checks: each succeeded or failed with ErrLimit, the
// inbox counted as many refusals as there were failures, and every
// operation's bytes landed. It returns the imms of the successes.
func (p *VerbsPair) flood(t *testing.T, n int) map[uint32]bool {
	t.Helper()
	const size = 256
	ha, la := Alloc(t, p.RegA, n*size, buffer.AccessReadWrite)
	hb, lb := Alloc(t, p.RegB, n*size, accessNotify)
	Random(t, la)
	p.Inbox.SetCheck(bytesLanded(hb, lb, la))
	refusedBefore, _, _ := p.Inbox.Refused()
	rec := NewRecorder(n)
	deadline := time.Now().Add(p.f.Timeout)
	for i := range n {
		wr, release := VerbWR(t, p.RegA, backend.OpWriteImm, Slice(t, ha, i*size, size), Slice(t, hb, i*size, size), Operands{Imm: uint32(i)}, deadline, rec)
		defer release()
		if err := p.Route.Post(wr); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	ok := make(map[uint32]bool)
	limited := uint64(0)
	for range n {
		res := rec.Wait(t, p.f.Timeout)
		switch {
		case res.Err == nil:
			ok[res.WR.Imm] = true
		case errors.Is(res.Err, rdmamgr.ErrLimit):
			limited++
		default:
			t.Fatalf("put-imm %d: %v, want success or ErrLimit", res.WR.Imm, res.Err)
		}
	}
	AssertSame(t, "bytes of every put-imm, refused or not", lb, la)
	refused, _, _ := p.Inbox.Refused()
	if refused-refusedBefore != limited {
		t.Fatalf("%d operations failed with ErrLimit, the inbox refused %d", limited, refused-refusedBefore)
	}
	t.Logf("%d of %d events delivered, %d refused", len(ok), n, limited)
	return ok
}
