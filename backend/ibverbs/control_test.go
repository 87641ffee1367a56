//go:build ibverbs

package ibverbs

import (
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// TestControlRouteClose: closing a route with Sends and PutWithImm in
// flight (some awaiting their acks) completes each exactly once, with
// success or the route's error; nothing hangs, and the backends go on.
func TestControlRouteClose(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	in := newTestInbox(regB, 256, 256)
	b.SetInbox(in)
	ha, _ := backendtest.Alloc(t, regA, 4096, buffer.AccessReadWrite)
	hb, _ := backendtest.Alloc(t, regB, 4096, accessNotifyW)
	for round := range 3 {
		rt := connect(t, a, b)
		const n = 64
		rec := backendtest.NewRecorder(n)
		posted := 0
		closed := make(chan struct{})
		for i := range n {
			var wr *backend.WorkRequest
			var release func()
			if i%2 == 0 {
				in.post(4096)
				wr, release = sendWR(t, regA, ha, uint32(i), false, rec)
			} else {
				wr, release = backendtest.NewWR(t, regA, backend.OpWriteImm, ha, hb, time.Now().Add(waitTimeout), rec)
			}
			defer release()
			if err := rt.Post(wr); err != nil {
				if i <= n/2 || !errors.Is(err, rdmamgr.ErrClosed) {
					t.Fatalf("round %d: post %d: %v", round, i, err)
				}
				break
			}
			posted++
			if i == n/2 {
				go func() { // ends the route with work in flight
					rt.Close()
					close(closed)
				}()
			}
		}
		ok, failed := 0, 0
		for range posted {
			res := rec.Wait(t, waitTimeout)
			switch {
			case res.Err == nil:
				ok++
			case errors.Is(res.Err, rdmamgr.ErrClosed):
				failed++
			default:
				t.Fatalf("round %d: %s: %v", round, res.WR.Op, res.Err)
			}
		}
		<-closed
		time.Sleep(10 * time.Millisecond)
		rec.None(t)
		t.Logf("round %d: %d posted, %d done, %d failed", round, posted, ok, failed)
	}
	rt := connect(t, a, b)
	in.post(4096)
	if err := send(t, rt, regA, ha, 1, true); err != nil {
		t.Fatalf("send on a new route: %v", err)
	}
}

// TestHostileControlMessage: a malformed control message fails the
// owner's queue pair (rdmamgr.ErrProtocol) and reaches no inbox.
func TestHostileControlMessage(t *testing.T) {
	requireDevices(t)
	a, _ := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	in := newTestInbox(regB, 4, 4)
	b.SetInbox(in)
	rt := connect(t, a, b).(*route)
	acc := acceptedRoute(t, b)

	// A raw SEND of a notice with reserved bytes set.
	wr := &backend.WorkRequest{Op: backend.OpSend, Deadline: time.Now().Add(waitTimeout), Done: backendtest.NewRecorder(1)}
	if err := rt.reserve(1, false, wr, true); err != nil {
		t.Fatal(err)
	}
	o := rt.newOp(wr, 1, false)
	ch := getChain()
	defer putChain(ch)
	ch.addOp(o)
	cell := rt.takeCell()
	o.chunks[0].cell = cell + 1
	m := ctlMsg{kind: ctlNotice, imm: 1, region: 1, length: 1}
	p := rt.ring.cell(cell)
	m.putNotice(p)
	p[2] = 0xff
	id := ch.addID(a.slots.alloc(&o.chunks[0]))
	ch.batch.addSend(id, rt.ring.cellAddr(cell), ctlNoticeSize, rt.ring.mr.lkey, 0, 0, 0)
	if _, err := rt.submit(ch); err != nil {
		t.Fatal(err)
	}
	wr.Done.(*backendtest.Recorder).Wait(t, waitTimeout)
	select {
	case <-acc.Done():
		if !errors.Is(acc.Err(), rdmamgr.ErrProtocol) {
			t.Fatalf("owner's queue pair failed with %v, want ErrProtocol", acc.Err())
		}
	case <-time.After(waitTimeout):
		t.Fatal("owner's queue pair survived a malformed control message")
	}
	in.noEvent(t)
}
