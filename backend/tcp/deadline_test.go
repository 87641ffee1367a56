package tcp

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// fastWatchdog is the initiator config of the deadline tests. Heartbeats
// are not what they test, and the fake server answers no ping: a ping
// would reach it in place of the request it waits for (the 32 MiB buffers
// take a second to fill under -race), and its silence while it reads a
// long payload would fail the route with ErrPeerGone. So heartbeats come
// only after waitTimeout (a test that wants them sets its own), and an
// idle connection is closed only after longer still.
func fastWatchdog() Config {
	return Config{ConnsPerRoute: 1, WatchdogInterval: 5 * time.Millisecond,
		HeartbeatInterval: waitTimeout, PeerTimeout: 2 * waitTimeout, IdleTimeout: 3 * waitTimeout}
}

func assertUp(t *testing.T, rt backend.Route) {
	t.Helper()
	select {
	case <-rt.Done():
		t.Fatalf("route failed: %v", rt.Err())
	default:
	}
	if err := rt.Err(); err != nil {
		t.Fatalf("route Err = %v while up", err)
	}
}

func assertFailed(t *testing.T, rt backend.Route, want error) {
	t.Helper()
	select {
	case <-rt.Done():
	case <-time.After(waitTimeout):
		t.Fatalf("route Done not closed")
	}
	if err := rt.Err(); !errors.Is(err, want) {
		t.Fatalf("route Err = %v, want %v", err, want)
	}
}

// An op whose response never comes fails with ErrDeadline; the route stays
// up, and the late response, when it comes, is dropped.
func TestDeadlineNoResponse(t *testing.T) {
	f := newFakeServer(t)
	a, regA := newBackend(t, fastWatchdog(), backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	_, local := backendtest.Alloc(t, regA, 1000, buffer.AccessReadWrite)
	rec := backendtest.NewRecorder(2)

	first := &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(1000),
		Deadline: time.Now().Add(100 * time.Millisecond), Done: rec}
	if err := rt.Post(first); err != nil {
		t.Fatalf("post: %v", err)
	}
	h1 := sc.readReq(t)
	sc.readPayload(t, int(h1.length))
	res := rec.Wait(t, waitTimeout)
	if res.WR != first || !errors.Is(res.Err, rdmamgr.ErrDeadline) {
		t.Fatalf("unanswered write completed with %v, want ErrDeadline", res.Err)
	}
	assertUp(t, rt)

	second := &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(1000),
		Deadline: time.Now().Add(waitTimeout), Done: rec}
	if err := rt.Post(second); err != nil {
		t.Fatalf("post: %v", err)
	}
	h2 := sc.readReq(t)
	sc.readPayload(t, int(h2.length))
	sc.respond(t, respHeader{op: opWrite, wrid: h1.wrid}, nil) // late
	sc.respond(t, respHeader{op: opWrite, wrid: h2.wrid}, nil)
	res = rec.Wait(t, waitTimeout)
	if res.WR != second || res.Err != nil {
		t.Fatalf("second write: %v (same wr: %v)", res.Err, res.WR == second)
	}
	rec.None(t)
	assertUp(t, rt)
	if st := rt.Stats(); st.Ops != 1 || st.Errors != 1 || st.InFlight != 0 {
		t.Fatalf("stats %+v, want 1 op, 1 error", st)
	}
}

// A READ whose response arrives after its deadline must not write into the
// local buffer: the memory was handed back to the poster.
func TestLateReadDoesNotTouchMemory(t *testing.T) {
	f := newFakeServer(t)
	a, regA := newBackend(t, fastWatchdog(), backendtest.OwnerA)
	rt := f.connect(t, a)
	sc := f.accept(t)
	const n = 64 << 10
	_, local := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	_, other := backendtest.Alloc(t, regA, n, buffer.AccessReadWrite)
	pattern := bytes.Repeat([]byte{0x5A}, n)
	copy(local, pattern)
	rec := backendtest.NewRecorder(2)

	late := &backend.WorkRequest{Op: backend.OpRead, Local: local, Remote: fakeRemote(n),
		Deadline: time.Now().Add(100 * time.Millisecond), Done: rec}
	if err := rt.Post(late); err != nil {
		t.Fatalf("post: %v", err)
	}
	h1 := sc.readReq(t)
	if h1.op != opRead || h1.length != n {
		t.Fatalf("request %+v", h1)
	}
	if res := rec.Wait(t, waitTimeout); !errors.Is(res.Err, rdmamgr.ErrDeadline) {
		t.Fatalf("late read completed with %v, want ErrDeadline", res.Err)
	}
	// The memory is the poster's again; the server answers now.
	sc.respond(t, respHeader{op: opRead, length: n, wrid: h1.wrid}, bytes.Repeat([]byte{0xC3}, n))

	// Responses are read in order: once a second read completed, the late
	// payload has been consumed (and must have been dropped).
	want := backendtest.RandomData(t, n)
	next := &backend.WorkRequest{Op: backend.OpRead, Local: other, Remote: fakeRemote(n),
		Deadline: time.Now().Add(waitTimeout), Done: rec}
	if err := rt.Post(next); err != nil {
		t.Fatalf("post: %v", err)
	}
	h2 := sc.readReq(t)
	sc.respond(t, respHeader{op: opRead, length: n, wrid: h2.wrid}, want)
	if res := rec.Wait(t, waitTimeout); res.WR != next || res.Err != nil {
		t.Fatalf("second read: %v", res.Err)
	}
	backendtest.AssertSame(t, "local memory of the expired read", local, pattern)
	backendtest.AssertSame(t, "second read", other, want)
	assertUp(t, rt)
}
