//go:build linux

package shm_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// testInbox is a minimal backend.Inbox: events into a channel, one posted
// receive buffer at a time.
type testInbox struct {
	events chan backend.Event
	mu     sync.Mutex
	posted []byte
	got    chan []byte
}

func (in *testInbox) Event(ev backend.Event) error {
	select {
	case in.events <- ev:
		return nil
	default:
		return rdmamgr.ErrLimit
	}
}

func (in *testInbox) Recv(peer, n uint64) (backend.Landing, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.posted == nil:
		return nil, rdmamgr.ErrNoReceive
	case uint64(len(in.posted)) < n:
		return nil, rdmamgr.ErrReceiveTooSmall
	}
	p := in.posted
	in.posted = nil
	return &testLanding{in: in, mem: p}, nil
}

type testLanding struct {
	in  *testInbox
	mem []byte
}

func (l *testLanding) Mem() []byte { return l.mem }
func (l *testLanding) Done(n int, imm uint32, hasImm bool, err error) {
	if err == nil {
		l.in.got <- append([]byte(nil), l.mem[:n]...)
	}
}

// TestVerbs: atomics agree with the owner's sync/atomic, a PutWithImm's
// event comes after its bytes, a Send lands in the posted buffer.
func TestVerbs(t *testing.T) {
	p := newPair(t, shmConfig())
	in := &testInbox{events: make(chan backend.Event, 4), got: make(chan []byte, 1)}
	p.b.SetInbox(in)
	hb, lb := backendtest.Alloc(t, p.regB, 4096, buffer.AccessReadWrite|buffer.AccessAtomic|buffer.AccessNotify)
	word := (*uint64)(unsafe.Pointer(&lb[8]))

	// FetchAdd from 4 goroutines while the owner adds too: exact.
	var wg sync.WaitGroup
	const n = 2000
	for g := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if g == 4 {
					atomic.AddUint64(word, 1)
					continue
				}
				if _, err := atomicOp(t, p, backend.OpFetchAdd, slice(hb, 8, 8), 0, 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := atomic.LoadUint64(word); got != 5*n {
		t.Fatalf("counter %d, want %d", got, 5*n)
	}
	if old, err := atomicOp(t, p, backend.OpCompareSwap, slice(hb, 8, 8), 5*n, 7); err != nil || old != 5*n || atomic.LoadUint64(word) != 7 {
		t.Fatalf("CAS: old %d err %v word %d", old, err, atomic.LoadUint64(word))
	}
	if old, err := atomicOp(t, p, backend.OpCompareSwap, slice(hb, 8, 8), 1, 9); err != nil || old != 7 || atomic.LoadUint64(word) != 7 {
		t.Fatalf("failed CAS: old %d err %v word %d", old, err, atomic.LoadUint64(word))
	}
	if _, err := atomicOp(t, p, backend.OpFetchAdd, slice(hb, 12, 8), 0, 1); !errors.Is(err, rdmamgr.ErrMisaligned) {
		t.Fatalf("misaligned: %v", err)
	}

	// PutWithImm: the event names the bytes, which are there.
	ha, la := backendtest.Alloc(t, p.regA, 64, buffer.AccessReadWrite)
	backendtest.Random(t, la)
	wr, release := backendtest.NewWR(t, p.regA, backend.OpWriteImm, ha, slice(hb, 128, 64), time.Now().Add(timeout), nil)
	wr.Imm = 42
	err := backendtest.DoWR(t, timeout, p.route, wr)
	release()
	if err != nil {
		t.Fatalf("put with imm: %v", err)
	}
	select {
	case ev := <-in.events:
		if ev.Imm != 42 || ev.Offset != 128 || ev.Length != 64 || ev.Region != hb.Region || ev.Peer != backendtest.OwnerA {
			t.Fatalf("event %+v", ev)
		}
		backendtest.AssertSame(t, "bytes of the event", lb[128:192], la)
	case <-time.After(timeout):
		t.Fatal("no event")
	}

	// Send: none posted, then posted.
	if err := send(t, p, ha, 5); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("send with nothing posted: %v", err)
	}
	in.mu.Lock()
	in.posted = make([]byte, 100)
	in.mu.Unlock()
	if err := send(t, p, ha, 5); err != nil {
		t.Fatalf("send: %v", err)
	}
	backendtest.AssertSame(t, "message", <-in.got, la)
}

func shmConfig() shm.Config { return shm.Config{} }

func atomicOp(t *testing.T, p *pair, op backend.Op, remote buffer.Buffer, compare, swap uint64) (uint64, error) {
	wr := &backend.WorkRequest{Op: op, Remote: remote, Compare: compare, Swap: swap, Deadline: time.Now().Add(timeout)}
	err := backendtest.DoWR(t, timeout, p.route, wr)
	return wr.Result, err
}

func send(t *testing.T, p *pair, local buffer.Buffer, imm uint32) error {
	wr, release := backendtest.NewWR(t, p.regA, backend.OpSend, local, buffer.Buffer{}, time.Now().Add(timeout), nil)
	defer release()
	wr.Imm, wr.HasImm = imm, true
	return backendtest.DoWR(t, timeout, p.route, wr)
}
