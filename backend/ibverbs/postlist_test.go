//go:build ibverbs

package ibverbs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// waitAll takes n completions from rec and fails on any error or on a
// work request completed twice.
func waitAll(t *testing.T, rec *backendtest.Recorder, n int) {
	t.Helper()
	seen := map[*backend.WorkRequest]bool{}
	for range n {
		res := rec.Wait(t, waitTimeout)
		if res.Err != nil {
			t.Fatalf("%s: %v", res.WR.Op, res.Err)
		}
		if seen[res.WR] {
			t.Fatalf("%s completed twice", res.WR.Op)
		}
		seen[res.WR] = true
	}
	time.Sleep(10 * time.Millisecond)
	rec.None(t)
}

// TestPostListOneDoorbell: a list of Puts, Gets, a PutWithImm, a Send and
// a FetchAdd goes to the device in one ibv_post_send; every operation
// completes once, the bytes land, the event and the message arrive.
func TestPostListOneDoorbell(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	in := newTestInbox(regB, 4, 4)
	b.SetInbox(in)
	rt := connect(t, a, b).(*route)
	const puts, size = 32, 64
	ha, la := backendtest.Alloc(t, regA, 2*puts*size, buffer.AccessReadWrite)
	hb, lb := backendtest.Alloc(t, regB, 2*puts*size, accessNotifyW|buffer.AccessRead|buffer.AccessAtomic)
	backendtest.Random(t, la)
	backendtest.Random(t, lb)
	wantGot := append([]byte(nil), lb[puts*size:]...)
	rec := backendtest.NewRecorder(2*puts + 3)
	var wrs []*backend.WorkRequest
	add := func(op backend.Op, local, remote buffer.Buffer) *backend.WorkRequest {
		wr, release := backendtest.NewWR(t, regA, op, local, remote, time.Now().Add(waitTimeout), rec)
		t.Cleanup(release)
		wrs = append(wrs, wr)
		return wr
	}
	for i := range puts {
		add(backend.OpWrite, backendtest.Slice(t, ha, i*size, size), backendtest.Slice(t, hb, i*size, size))
		add(backend.OpRead, backendtest.Slice(t, ha, (puts+i)*size, size), backendtest.Slice(t, hb, (puts+i)*size, size))
	}
	imm := add(backend.OpWriteImm, backendtest.Slice(t, ha, 0, 8), backendtest.Slice(t, hb, 0, 8))
	imm.Imm = 77
	in.post(64)
	add(backend.OpSend, backendtest.Slice(t, ha, 8, 16), buffer.Buffer{})
	fa := &backend.WorkRequest{Op: backend.OpFetchAdd, Remote: backendtest.Slice(t, hb, 0, 8), Swap: 1,
		Deadline: time.Now().Add(waitTimeout), Done: rec}
	wrs = append(wrs, fa)

	before := rt.doorbells.Load()
	n, err := rt.PostList(wrs)
	if n != len(wrs) || err != nil {
		t.Fatalf("PostList = %d, %v; want %d, nil", n, err, len(wrs))
	}
	if d := rt.doorbells.Load() - before; d != 1 {
		t.Errorf("%d ibv_post_send calls for one list, want 1", d)
	}
	waitAll(t, rec, len(wrs))
	// The FetchAdd ran after the Puts and the PutWithImm (RC order): it
	// added 1 to the word they wrote.
	want := binary.NativeEndian.Uint64(la[:8])
	if fa.Result != want {
		t.Errorf("FetchAdd's old value %#x, want the Put's %#x", fa.Result, want)
	}
	if got := ownerWord(t, lb, 0).Load(); got != want+1 {
		t.Errorf("word after the FetchAdd %#x, want %#x", got, want+1)
	}
	backendtest.AssertSame(t, "puts", lb[8:puts*size], la[8:puts*size])
	backendtest.AssertSame(t, "gets", la[puts*size:], wantGot)
	if ev := in.nextEvent(t); ev.ev.Imm != 77 {
		t.Errorf("event imm %d, want 77", ev.ev.Imm)
	}
	if m := in.nextMsg(t); !bytes.Equal(m.data, la[8:24]) {
		t.Errorf("message %x, want %x", m.data, la[8:24])
	}
}

// TestPostListBeyondInFlight: a list longer than the room in flight is
// posted in several chains as room frees, in order, every one completed.
func TestPostListBeyondInFlight(t *testing.T) {
	requireDevices(t)
	cfg := DefaultConfig()
	cfg.MaxInFlight = 8
	a, regA := started(t, cfg, 1)
	b, regB := started(t, DefaultConfig(), 2)
	rt := connect(t, a, b).(*route)
	const ops, size = 100, 8
	ha, la := backendtest.Alloc(t, regA, ops*size, buffer.AccessReadWrite)
	hb, lb := backendtest.Alloc(t, regB, ops*size, buffer.AccessReadWrite)
	backendtest.Random(t, la)
	rec := backendtest.NewRecorder(ops)
	wrs := make([]*backend.WorkRequest, ops)
	for i := range wrs {
		wr, release := backendtest.NewWR(t, regA, backend.OpWrite, backendtest.Slice(t, ha, i*size, size),
			backendtest.Slice(t, hb, i*size, size), time.Now().Add(waitTimeout), rec)
		t.Cleanup(release)
		wrs[i] = wr
	}
	before := rt.doorbells.Load()
	if n, err := rt.PostList(wrs); n != ops || err != nil {
		t.Fatalf("PostList = %d, %v; want %d, nil", n, err, ops)
	}
	if d := rt.doorbells.Load() - before; d < ops/8 || d > ops {
		t.Errorf("%d ibv_post_send calls for %d operations, %d in flight", d, ops, 8)
	}
	waitAll(t, rec, ops)
	backendtest.AssertSame(t, "puts", lb, la)
}

// TestPostListPartial: a bad work request in the middle of a list stops
// it there: the ones before are posted and complete, it fails with its
// own error, the ones after are untouched (never completed, no bytes).
func TestPostListPartial(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	rt := connect(t, a, b).(*route)
	ha, la := backendtest.Alloc(t, regA, 64, buffer.AccessReadWrite)
	hb, lb := backendtest.Alloc(t, regB, 64, buffer.AccessReadWrite)
	backendtest.Random(t, la)
	clear(lb)
	rec := backendtest.NewRecorder(4)
	wrs := make([]*backend.WorkRequest, 4)
	for i := range wrs {
		wr, release := backendtest.NewWR(t, regA, backend.OpWrite, backendtest.Slice(t, ha, i*16, 16),
			backendtest.Slice(t, hb, i*16, 16), time.Now().Add(waitTimeout), rec)
		t.Cleanup(release)
		wrs[i] = wr
	}
	wrs[2].Remote.Length = 8 // local and remote lengths differ
	n, err := rt.PostList(wrs)
	if n != 2 || !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("PostList = %d, %v; want 2, rdmamgr.ErrProtocol", n, err)
	}
	waitAll(t, rec, 2)
	backendtest.AssertSame(t, "posted puts", lb[:32], la[:32])
	backendtest.AssertSame(t, "unposted puts", lb[32:], make([]byte, 32))

	// On a closed route nothing is posted.
	rt.Close()
	if n, err := rt.PostList(wrs[:2]); n != 0 || !errors.Is(err, rdmamgr.ErrClosed) {
		t.Fatalf("PostList on a closed route = %d, %v; want 0, rdmamgr.ErrClosed", n, err)
	}
	rec.None(t)
}
