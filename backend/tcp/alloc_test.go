package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// The steady-state data path allocates nothing per operation: a reused
// WorkRequest (which keeps its op from its second post on), batched writev
// on both sides.
func TestSteadyStateAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation count (sync.Pool drops items at random under -race)")
	}
	p := newPair(t, Config{}, Config{})
	qp := wiring.NewQueuePair(1, backendtest.OwnerB, p.route, p.regA, qpbind.Options{}).(*queuepair.QueuePair)
	for _, size := range []int{64, 4096, 1 << 20} {
		local, _ := backendtest.Alloc(t, p.regA, size, buffer.AccessReadWrite)
		remote, _ := backendtest.Alloc(t, p.regB, size, buffer.AccessReadWrite)
		ctx := context.Background()
		var w queuepair.WorkRequest
		for _, op := range []string{"put", "get"} {
			run := func() {
				if op == "put" {
					qp.PostPut(ctx, &w, local, remote)
				} else {
					qp.PostGet(ctx, &w, local, remote)
				}
				if err := w.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for range 100 {
				run() // warm pools and maps
			}
			if a := testing.AllocsPerRun(500, run); a > 0.05 {
				t.Errorf("%s %d bytes: %.2f allocations per operation, want 0", op, size, a)
			} else {
				t.Logf("%s %d bytes: %.3f allocations per operation", op, size, a)
			}
		}
	}
}

// signalDone is a Completer that allocates nothing: one token per completion.
type signalDone struct {
	ch  chan struct{}
	err error
}

func (s *signalDone) Complete(_ *backend.WorkRequest, err error) {
	s.err = err
	s.ch <- struct{}{}
}

// The new operations allocate nothing per operation either, on either
// side, with a reused work request (backendtest's Inbox reuses its
// landings).
func TestVerbsSteadyStateAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation count (sync.Pool drops items at random under -race)")
	}
	p := newPair(t, Config{}, Config{})
	in := backendtest.NewInbox(p.regB, 1, 1)
	p.b.SetInbox(in)
	t.Cleanup(in.Close)
	_, local := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	remote, _ := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite|buffer.AccessNotify|buffer.AccessAtomic)
	word := backendtest.Slice(t, remote, 8, 8)
	rb := backendtest.Slice(t, remote, 1024, 1024)
	sig := &signalDone{ch: make(chan struct{}, 1)}
	var wr backend.WorkRequest
	for _, tc := range []struct {
		name string
		arm  func()
		then func()
	}{
		{"fetch-add", func() { wr.Op, wr.Remote, wr.Swap = backend.OpFetchAdd, word, 1 }, func() {}},
		{"compare-swap", func() { wr.Op, wr.Remote, wr.Compare, wr.Swap = backend.OpCompareSwap, word, 1, 2 }, func() {}},
		{"write-imm 64", func() {
			wr.Op, wr.Local, wr.Remote, wr.Imm = backend.OpWriteImm, local[:64], backendtest.Slice(t, remote, 0, 64), 5
		},
			func() { <-in.Events() }},
		{"send 64", func() {
			if err := in.Post(rb); err != nil {
				t.Fatal(err)
			}
			wr.Op, wr.Local, wr.Imm, wr.HasImm = backend.OpSend, local[:64], 5, true
		}, func() { <-in.Messages() }},
	} {
		run := func() {
			wr.Reset()
			tc.arm()
			wr.Deadline, wr.Done = time.Now().Add(waitTimeout), sig
			if err := p.route.Post(&wr); err != nil {
				t.Fatal(err)
			}
			<-sig.ch
			if sig.err != nil {
				t.Fatal(sig.err)
			}
			tc.then()
		}
		for range 100 {
			run() // warm pools and maps
		}
		if a := testing.AllocsPerRun(500, run); a > 0.05 {
			t.Errorf("%s: %.2f allocations per operation, want 0", tc.name, a)
		} else {
			t.Logf("%s: %.3f allocations per operation", tc.name, a)
		}
	}
}
