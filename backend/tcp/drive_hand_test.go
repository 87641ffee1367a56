package tcp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// The read role handed back where a lent one would stall (drive.go),
// each with a watchdog that never ticks in the test's time (or never
// needs to), so only the hand-back under test can make it pass.

// quietCfg is a configuration whose watchdog and heartbeat never act
// within a test.
func quietCfg() Config {
	return Config{WatchdogInterval: time.Hour, HeartbeatInterval: time.Hour, PeerTimeout: 2 * time.Hour, IdleTimeout: 3 * time.Hour}
}

// parkedFake connects a one-connection route to a fake server and has a
// waiter ask for the read role once, so the connection's reader parks
// it; it returns the route, the fake connection and 64 bytes of local
// memory.
func parkedFake(t *testing.T, cfg Config) (*route, *fakeConn, []byte) {
	t.Helper()
	f := newFakeServer(t)
	cfg.ConnsPerRoute = 1
	a, regA := newBackend(t, cfg, backendtest.OwnerA)
	rt := f.connect(t, a).(*route)
	fc := f.accept(t)
	_, local := backendtest.Alloc(t, regA, 64, buffer.AccessReadWrite)
	g := newWaitedGet(local[:8], fakeRemote(8))
	g.post(t, rt)
	rt.Drive(context.Background(), g.wr) // not lent: it asks for the role
	h := fc.readReq(t)
	fc.respond(t, respHeader{op: opRead, length: 8, wrid: h.wrid}, make([]byte, 8))
	if err := g.result(t); err != nil {
		t.Fatal(err)
	}
	waitParked(t, rt.conns[0])
	return rt, fc, local
}

// A notice held by the fence behind a Put that was lent the role, whose
// waiter waits for the notice first: the hold hands the role back, so the
// Put's answer is read and the notice goes out.
func TestDriveHeldNoticeBehindLentPut(t *testing.T) {
	rt, fc, local := parkedFake(t, quietCfg())
	done := make(chanCompleter, 2)
	put := &backend.WorkRequest{Op: backend.OpWrite, Local: local[:8], Remote: fakeRemote(8), Done: done, Waited: true,
		Deadline: time.Now().Add(waitTimeout)}
	postLent(t, rt, put)
	notice := &backend.WorkRequest{Op: backend.OpWriteImm, Local: local[8:16], Remote: fakeRemote(8), Imm: 1, Done: done,
		Waited: true, Deadline: time.Now().Add(waitTimeout)}
	if err := rt.Post(notice); err != nil {
		t.Fatal(err)
	}
	rt.Drive(context.Background(), notice) // held: nothing lent to it
	h := fc.readReq(t)
	fc.readPayload(t, 8)
	fc.respond(t, respHeader{op: opWrite, wrid: h.wrid}, nil)
	if h2 := fc.readReq(t); h2.op != opWriteImm {
		t.Fatalf("after the Put's answer came op %d, want the held write-imm", h2.op)
	}
}

// postLent posts wr on rt and fails the test unless the post was lent
// the read role of rt's first connection.
func postLent(t *testing.T, rt *route, wr *backend.WorkRequest) {
	t.Helper()
	if err := rt.Post(wr); err != nil {
		t.Fatal(err)
	}
	if rt.conns[0].lentTo.Load() != wr {
		t.Fatal("the post was not lent the read role")
	}
}

// slowCompleter's Complete takes d: the driven operation counts as ended
// (the watchdog may go idle) well before its driver parks the role again.
type slowCompleter struct {
	ch chan error
	d  time.Duration
}

func (s slowCompleter) Complete(_ *backend.WorkRequest, err error) {
	time.Sleep(s.d)
	s.ch <- err
}

// A driver that parks the role again after the watchdog went idle wakes
// it, so the idle connection still sees its peer's close within ticks
// (the heartbeat, which would also find it, never comes here).
func TestDriveReparkWakesWatchdog(t *testing.T) {
	cfg := quietCfg()
	cfg.WatchdogInterval = 5 * time.Millisecond
	rt, fc, local := parkedFake(t, cfg)
	sc := slowCompleter{ch: make(chan error, 1), d: 50 * time.Millisecond}
	wr := &backend.WorkRequest{Op: backend.OpRead, Local: local[:8], Remote: fakeRemote(8), Done: sc, Waited: true,
		Deadline: time.Now().Add(waitTimeout)}
	postLent(t, rt, wr)
	h := fc.readReq(t)
	fc.respond(t, respHeader{op: opRead, length: 8, wrid: h.wrid}, make([]byte, 8))
	rt.Drive(context.Background(), wr)
	if err := <-sc.ch; err != nil {
		t.Fatal(err)
	}
	fc.c.Close()
	select {
	case <-rt.Done():
	case <-time.After(waitTimeout):
		t.Fatal("the route did not notice its peer close an idle connection")
	}
}

// A driver that meets a frame breaking the protocol fails the route and
// leaves nothing behind it to be read: the payload of a bogus answer,
// itself a valid answer for another Get, completes nothing.
func TestDriveProtocolErrorStopsReading(t *testing.T) {
	rt, fc, local := parkedFake(t, quietCfg())
	g := newWaitedGet(local[:8], fakeRemote(8))
	g.wr.Deadline = time.Now().Add(waitTimeout)
	postLent(t, rt, g.wr)
	fc.readReq(t)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		rt.Drive(context.Background(), g.wr)
	}()
	waitDriven(t, rt.conns[0])
	g2 := newWaitedGet(local[16:24], fakeRemote(8))
	g2.wr.Waited = false
	g2.post(t, rt)
	h2 := fc.readReq(t)
	inner := make([]byte, respHeaderSize)
	(&respHeader{op: opRead, length: 8, wrid: h2.wrid}).encode(inner)
	inner = append(inner, "HOSTILE!"...)
	bogus := make([]byte, respHeaderSize)
	(&respHeader{op: opRead, length: uint32(len(inner)), wrid: 999}).encode(bogus)
	fc.writeRaw(t, append(bogus, inner...))
	<-returned
	if err := g2.result(t); !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("the Get behind the bogus answer: %v, want the route's ErrProtocol", err)
	}
	if string(local[16:24]) == "HOSTILE!" {
		t.Fatal("a bogus answer's payload was read as an answer")
	}
}

// A request whose Done channel its poster keeps (from its first call on,
// every completion sends one) is observed through it, not Wait: it is not
// posted Waited, so no role is lent to it and the reader reads it.
func TestDriveKeptDoneChannel(t *testing.T) {
	cfg := quietCfg()
	cfg.ConnsPerRoute = 1
	p := newPair(t, cfg, Config{})
	rt := p.route.(*route)
	qp := backendtest.NewQueuePair(t, rt, p.regA, backend.KindTCP, waitTimeout, nil)
	local, _ := backendtest.Alloc(t, p.regA, 16, buffer.AccessReadWrite)
	remote, _ := backendtest.Alloc(t, p.regB, 8, buffer.AccessReadWrite)
	l1, _ := local.Slice(0, 8)
	l2, _ := local.Slice(8, 8)
	ctx := context.Background()
	var w1, w2 queuepair.WorkRequest
	ch := w2.Done()
	rt.Drive(ctx, new(backend.WorkRequest)) // as a Wait that found no role: readers park
	for i := range 10 {
		qp.PostGet(ctx, &w1, l1, remote) // its Wait reads it (or finds it done)
		if err := w1.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		waitParked(t, rt.conns[0])
		qp.PostGet(ctx, &w2, l2, remote)
		select {
		case <-ch:
		case <-time.After(waitTimeout):
			t.Fatalf("get %d through a kept Done channel never completed", i)
		}
		if err := w2.Err(); err != nil {
			t.Fatal(err)
		}
	}
}
