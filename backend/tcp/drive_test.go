package tcp

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// The read role (drive.go): a waiter that reads its own answer, and every
// way the role goes back to the reader goroutine.

// waitedGet is an 8-byte Get posted as Waited on a route, with its
// completions on done.
type waitedGet struct {
	wr   *backend.WorkRequest
	done chanCompleter
}

func newWaitedGet(local []byte, remote buffer.Buffer) *waitedGet {
	done := make(chanCompleter, 1)
	return &waitedGet{done: done, wr: &backend.WorkRequest{Op: backend.OpRead, Local: local, Remote: remote, Done: done, Waited: true}}
}

func (g *waitedGet) post(t testing.TB, rt backend.Route) {
	t.Helper()
	g.wr.Deadline = time.Now().Add(waitTimeout)
	if err := rt.Post(g.wr); err != nil {
		t.Fatal(err)
	}
}

// result waits for the Get's outcome, up to waitTimeout.
func (g *waitedGet) result(t testing.TB) error {
	t.Helper()
	select {
	case res := <-g.done:
		return res.Err
	case <-time.After(waitTimeout):
		t.Fatal("the Get never completed")
		return nil
	}
}

// Once a waiter asked for the role, each Get posted alone is read by its
// own Drive: Drive returns with the Get completed and its bytes in place,
// and the connections' drivers, not their reader goroutines, read them.
func TestDriveReadsOwnAnswer(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	_, local := backendtest.Alloc(t, p.regA, 8, buffer.AccessReadWrite)
	hr, mem := backendtest.Alloc(t, p.regB, 8, buffer.AccessReadWrite)
	rt := p.route.(*route)
	g := newWaitedGet(local, hr)
	const n = 300
	for i := range n {
		mem[0], mem[7] = byte(i), byte(i>>8)
		g.post(t, rt)
		rt.Drive(context.Background(), g.wr)
		if err := g.result(t); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		if local[0] != byte(i) || local[7] != byte(i>>8) {
			t.Fatalf("get %d read %v", i, local)
		}
	}
	if d := rt.drivenOps(); d < n/2 {
		t.Fatalf("%d of %d Gets read by their own wait, want most", d, n)
	}
}

// A Get posted as Waited that nobody drives still completes: the
// watchdog hands the role it was lent back to the reader goroutine. And
// Undrive (a poll) hands it back at once.
func TestDriveUnwaitedCompletes(t *testing.T) {
	p := newPair(t, Config{ConnsPerRoute: 1, WatchdogInterval: 5 * time.Millisecond}, Config{})
	_, local := backendtest.Alloc(t, p.regA, 8, buffer.AccessReadWrite)
	hr, _ := backendtest.Alloc(t, p.regB, 8, buffer.AccessReadWrite)
	rt := p.route.(*route)
	g := newWaitedGet(local, hr)
	lentOnce := func() {
		t.Helper()
		// Until a post finds the role parked and lends it.
		for range 1000 {
			g.post(t, rt)
			if rt.conns[0].lentTo.Load() == g.wr {
				return
			}
			rt.Drive(context.Background(), g.wr)
			if err := g.result(t); err != nil {
				t.Fatal(err)
			}
		}
		t.Fatal("no post was lent the read role")
	}
	lentOnce()
	if err := g.result(t); err != nil { // nobody drives it
		t.Fatalf("undriven get: %v", err)
	}
	if rt.wantDrive.Load() {
		t.Fatal("a role lent and not taken left the route wanting drivers")
	}
	lentOnce()
	rt.Undrive(g.wr)
	if rt.conns[0].lentTo.Load() != nil {
		t.Fatal("Undrive left the role lent")
	}
	if err := g.result(t); err != nil {
		t.Fatalf("undriven get: %v", err)
	}
}

// fakeDriven connects a one-connection route to a fake server, has a
// waiter ask for the role once (one Get answered), and posts a second Get
// whose request the fake server reads and leaves unanswered, lent to its
// waiter. It returns the route, the fake connection, the Get and its
// request.
func fakeDriven(t *testing.T, cfg Config) (*route, *fakeConn, *waitedGet, reqHeader) {
	t.Helper()
	f := newFakeServer(t)
	cfg.ConnsPerRoute = 1
	a, regA := newBackend(t, cfg, backendtest.OwnerA)
	rt := f.connect(t, a).(*route)
	fc := f.accept(t)
	_, local := backendtest.Alloc(t, regA, 8, buffer.AccessReadWrite)
	g := newWaitedGet(local, fakeRemote(8))
	g.post(t, rt)
	rt.Drive(context.Background(), g.wr) // not lent yet: it asks for the role
	h := fc.readReq(t)
	fc.respond(t, respHeader{op: opRead, length: 8, wrid: h.wrid}, make([]byte, 8))
	if err := g.result(t); err != nil {
		t.Fatal(err)
	}
	waitParked(t, rt.conns[0])
	g.wr.Deadline = time.Now().Add(waitTimeout)
	postLent(t, rt, g.wr)
	return rt, fc, g, fc.readReq(t)
}

// A driving waiter whose ctx ends stops reading (within a watchdog tick)
// and hands the role back; its Get is still answered and completed by the
// reader goroutine.
func TestDriveCtxEnds(t *testing.T) {
	rt, fc, g, h := fakeDriven(t, Config{WatchdogInterval: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		rt.Drive(ctx, g.wr)
	}()
	waitDriven(t, rt.conns[0])
	cancel() // while it reads: the watchdog interrupts it
	select {
	case <-returned:
	case <-time.After(waitTimeout):
		t.Fatal("Drive did not return after its ctx ended")
	}
	select {
	case res := <-g.done:
		t.Fatalf("the Get completed unanswered: %v", res.Err)
	default:
	}
	fc.respond(t, respHeader{op: opRead, length: 8, wrid: h.wrid}, []byte("answered"))
	if err := g.result(t); err != nil {
		t.Fatal(err)
	}
	if string(g.wr.Local) != "answered" {
		t.Fatalf("read %q", g.wr.Local)
	}
}

// A ctx deadline ends the driver's read at the deadline, not a tick
// later: with a watchdog that never ticks in the test's time, Drive
// still returns.
func TestDriveCtxDeadline(t *testing.T) {
	rt, _, g, _ := fakeDriven(t, Config{WatchdogInterval: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		rt.Drive(ctx, g.wr)
	}()
	select {
	case <-returned:
	case <-time.After(waitTimeout):
		t.Fatal("Drive did not return at its ctx's deadline")
	}
	rt.Cancel(cancelled(g.wr))
	if err := g.result(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled get: %v", err)
	}
}

// waitParked waits until cc's reader parked its read role.
func waitParked(t *testing.T, cc *clientConn) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cc.parkedNow() {
		if time.Now().After(deadline) {
			t.Fatalf("the reader never parked its role (role %d, wantDrive %v, held %d, pings %d, route %v)", cc.roleNow(), cc.r.wantDrive.Load(), cc.slots.held.Load(), cc.pings, cc.r.Err())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// waitDriven waits until a waiter holds cc's read role.
func waitDriven(t *testing.T, cc *clientConn) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for cc.roleNow() != roleDriven {
		if time.Now().After(deadline) {
			t.Fatal("no waiter took the read role")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// cancelled records a cancel cause on wr and returns it.
func cancelled(wr *backend.WorkRequest) *backend.WorkRequest {
	wr.RequestCancel(context.Canceled)
	return wr
}

// A cancel from elsewhere ends the driven Get at once; the driver
// returns, and the late answer is drained by the reader goroutine, not
// written into the memory the cancel gave back.
func TestDriveCancelledElsewhere(t *testing.T) {
	rt, fc, g, h := fakeDriven(t, Config{WatchdogInterval: time.Hour})
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		rt.Drive(context.Background(), g.wr)
	}()
	rt.Cancel(cancelled(g.wr))
	if err := g.result(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled get: %v", err)
	}
	select {
	case <-returned:
	case <-time.After(waitTimeout):
		t.Fatal("Drive did not return after its Get was cancelled")
	}
	clear(g.wr.Local)
	fc.respond(t, respHeader{op: opRead, length: 8, wrid: h.wrid}, []byte("too late"))
	// The route goes on: a Get after it (not Waited: nobody drives it,
	// and this watchdog never ticks) is answered and read.
	local2 := make([]byte, 8)
	g2 := newWaitedGet(local2, fakeRemote(8))
	g2.wr.Waited = false
	g2.post(t, rt)
	h2 := fc.readReq(t)
	fc.respond(t, respHeader{op: opRead, length: 8, wrid: h2.wrid}, []byte("next one"))
	if err := g2.result(t); err != nil {
		t.Fatal(err)
	}
	if string(local2) != "next one" {
		t.Fatalf("the next Get read %q", local2)
	}
	if !bytes.Equal(g.wr.Local, make([]byte, 8)) {
		t.Fatalf("a cancelled Get's memory was written after its cancel: %q", g.wr.Local)
	}
}

// Closing the route while a waiter drives ends the wait, fails the Get
// with ErrClosed and leaves no goroutine behind (goleak, TestMain).
func TestDriveClose(t *testing.T) {
	rt, _, g, _ := fakeDriven(t, Config{WatchdogInterval: time.Hour})
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		rt.Drive(context.Background(), g.wr)
	}()
	waitDriven(t, rt.conns[0])
	rt.Close()
	if err := g.result(t); !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("get on a closed route: %v", err)
	}
	<-returned
}

// A connection whose role is parked while idle still notices its peer
// going away, long before a heartbeat would: the watchdog hands an idle
// parked role back to the reader goroutine, which reads the close.
func TestDriveParkedNoticesPeerGone(t *testing.T) {
	cfg := Config{WatchdogInterval: 5 * time.Millisecond, HeartbeatInterval: time.Hour, PeerTimeout: 2 * time.Hour, IdleTimeout: 3 * time.Hour}
	rt, fc, g, h := fakeDriven(t, cfg)
	fc.respond(t, respHeader{op: opRead, length: 8, wrid: h.wrid}, make([]byte, 8))
	rt.Drive(context.Background(), g.wr)
	if err := g.result(t); err != nil {
		t.Fatal(err)
	}
	fc.c.Close()
	select {
	case <-rt.Done():
	case <-time.After(waitTimeout):
		t.Fatal("the route did not notice its peer close an idle connection")
	}
	if err := rt.Err(); !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("route error %v, want ErrPeerGone", err)
	}
}

// A READ answer larger than the read buffer is not whole in it: the
// driver hands it to the reader goroutine, which reads it into place.
func TestDriveLargeAnswer(t *testing.T) {
	p := newPair(t, Config{ConnsPerRoute: 1}, Config{})
	const n = 64 << 10 // one chunk, sixteen times the small read buffer
	_, local := backendtest.Alloc(t, p.regA, n, buffer.AccessReadWrite)
	hr, mem := backendtest.Alloc(t, p.regB, n, buffer.AccessReadWrite)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	rt := p.route.(*route)
	hr8, err := hr.Slice(0, 8)
	if err != nil {
		t.Fatal(err)
	}
	g := newWaitedGet(local[:8], hr8)
	g.post(t, rt)
	rt.Drive(context.Background(), g.wr) // asks for the role
	if err := g.result(t); err != nil {
		t.Fatal(err)
	}
	big := newWaitedGet(local, hr)
	before := rt.drivenOps()
	for range 20 {
		clear(local)
		waitParked(t, rt.conns[0])
		big.post(t, rt)
		if rt.conns[0].lentTo.Load() != big.wr {
			t.Fatal("the large Get was not lent the read role")
		}
		rt.Drive(context.Background(), big.wr)
		if err := big.result(t); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(local, mem) {
			t.Fatal("a large Get read the wrong bytes")
		}
	}
	if d := rt.drivenOps() - before; d != 0 {
		t.Fatalf("%d large Gets read whole by their waiters, want 0 (the reader goroutine's)", d)
	}
}

// A WRITE answered while its payload is still being written (the owner
// may answer before it read the payload; stAnswered) is the writer's to
// complete once its write returns: the driver that read the answer stops
// reading then, rather than wait for a frame that will not come.
func TestDriveWriteAnsweredEarly(t *testing.T) {
	const n = 32 << 20 // far more than the socket buffers hold: the write stalls
	cfg := Config{WatchdogInterval: time.Hour, HeartbeatInterval: time.Hour, PeerTimeout: 2 * time.Hour,
		IdleTimeout: 3 * time.Hour, SocketBuffer: 64 << 10, ChunkSize: n, MaxFrameLen: 2 * n}
	rt, fc, g, h := fakeDriven(t, cfg)
	fc.respond(t, respHeader{op: opRead, length: 8, wrid: h.wrid}, make([]byte, 8))
	rt.Drive(context.Background(), g.wr)
	if err := g.result(t); err != nil {
		t.Fatal(err)
	}
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 3)
	}
	done := make(chanCompleter, 1)
	put := &backend.WorkRequest{Op: backend.OpWrite, Local: src, Remote: fakeRemote(n), Done: done, Waited: true,
		Deadline: time.Now().Add(waitTimeout)}
	postLent(t, rt, put)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		rt.Drive(context.Background(), put)
	}()
	ph := fc.readReq(t)
	fc.respond(t, respHeader{op: opWrite, wrid: ph.wrid}, nil) // before reading the payload
	select {
	case <-returned:
	case <-time.After(waitTimeout):
		t.Fatal("Drive kept reading after its Put was answered")
	}
	if got := fc.readPayload(t, n); !bytes.Equal(got, src) {
		t.Fatal("the Put's payload differs")
	}
	select {
	case res := <-done:
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the Put never completed")
	}
}

// Through package queuepair: a Get waited on alone (PostGet, then Wait)
// is posted Waited and read by its own Wait; a Get polled instead is
// handed back to the reader goroutine by its Poll (Undrive), even with a
// watchdog that never ticks in the test's time.
func TestDriveThroughQueuePair(t *testing.T) {
	p := newPair(t, Config{ConnsPerRoute: 1, WatchdogInterval: time.Hour}, Config{})
	rt := p.route.(*route)
	qp := backendtest.NewQueuePair(t, rt, p.regA, backend.KindTCP, waitTimeout, nil)
	local, lmem := backendtest.Alloc(t, p.regA, 8, buffer.AccessReadWrite)
	remote, rmem := backendtest.Alloc(t, p.regB, 8, buffer.AccessReadWrite)
	ctx := context.Background()
	var w queuepair.WorkRequest
	const n = 100
	for i := range n {
		rmem[0] = byte(i)
		qp.PostGet(ctx, &w, local, remote)
		if err := w.Wait(ctx); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		if lmem[0] != byte(i) {
			t.Fatalf("get %d read %d", i, lmem[0])
		}
	}
	if d := rt.drivenOps(); d < n/2 {
		t.Fatalf("%d of %d waited Gets read by their own Wait, want most", d, n)
	}
	before := rt.drivenOps()
	for i := range 20 {
		rmem[0] = byte(100 + i)
		qp.PostGet(ctx, &w, local, remote)
		deadline := time.Now().Add(waitTimeout)
		for {
			done, err := w.Poll()
			if done {
				if err != nil {
					t.Fatalf("polled get %d: %v", i, err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("polled get %d never completed", i)
			}
			runtime.Gosched()
		}
		if lmem[0] != byte(100+i) {
			t.Fatalf("polled get %d read %d", i, lmem[0])
		}
	}
	if d := rt.drivenOps() - before; d != 0 {
		t.Fatalf("%d polled Gets read by a driver", d)
	}
}
