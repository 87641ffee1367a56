//go:build ibverbs

package ibverbs

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

const accessNotifyW = buffer.AccessReadWrite | buffer.AccessNotify

// putImm runs one PutWithImm of local to remote.
func putImm(t testing.TB, rt backend.Route, reg *memreg.Registry, local, remote buffer.Buffer, imm uint32) error {
	t.Helper()
	wr, release := backendtest.NewWR(t, reg, backend.OpWriteImm, local, remote, time.Now().Add(waitTimeout), nil)
	defer release()
	wr.Imm = imm
	return backendtest.DoWR(t, waitTimeout, rt, wr)
}

// checkEvent asserts that e is the event of local's bytes put at remote
// with imm, from peer, with its bytes in place when it was delivered.
func checkEvent(t testing.TB, e evSnap, peer uint64, remote buffer.Buffer, imm uint32, want []byte) {
	t.Helper()
	ev := e.ev
	if ev.Peer != peer || ev.Region != remote.Region || ev.Offset != remote.Offset || ev.Length != remote.Length || ev.Imm != imm {
		t.Fatalf("event %+v, want peer %x region %d [%d,+%d) imm %d", ev, peer, remote.Region, remote.Offset, remote.Length, imm)
	}
	if !bytes.Equal(e.bytes, want) {
		t.Fatalf("event %d delivered before its bytes: they differ at %d", imm, backendtest.FirstDiff(e.bytes, want))
	}
}

// TestPutWithImm: the owner's inbox gets the event (peer, region, offset,
// length, imm) once the bytes are in place, for one and many work
// requests; events of one route come in posting order, also when the
// route's control messages wait for credits (two slots).
func TestPutWithImm(t *testing.T) {
	requireDevices(t)
	cfgA := DefaultConfig()
	cfgA.MaxMessage = 64 << 10 // 1 MiB is 16 work requests and the notice
	cfgA.RecvSlots = 2
	a, regA := started(t, cfgA, 1)
	b, regB := started(t, DefaultConfig(), 2)
	inB := newTestInbox(regB, 128, 0)
	b.SetInbox(inB)
	rt := connect(t, a, b)
	ha, la := backendtest.Alloc(t, regA, 1<<20, buffer.AccessReadWrite)
	hb, _ := backendtest.Alloc(t, regB, 2<<20, accessNotifyW)
	for _, tc := range []struct{ off, n int }{{0, 1}, {7, 4096}, {4096, 100000}, {1 << 20, 1 << 20}} {
		backendtest.Random(t, la)
		local, remote := backendtest.Slice(t, ha, 0, tc.n), backendtest.Slice(t, hb, tc.off, tc.n)
		if err := putImm(t, rt, regA, local, remote, uint32(tc.n)); err != nil {
			t.Fatalf("PutWithImm of %d bytes: %v", tc.n, err)
		}
		checkEvent(t, inB.nextEvent(t), 1, remote, uint32(tc.n), la[:tc.n])
	}
	inB.noEvent(t)

	// Many in flight, more than the two credits: in order, each after its
	// bytes.
	const n, size = 64, 4096
	backendtest.Random(t, la)
	rec := backendtest.NewRecorder(n)
	for i := range n {
		wr, release := backendtest.NewWR(t, regA, backend.OpWriteImm, backendtest.Slice(t, ha, i*size, size),
			backendtest.Slice(t, hb, i*size, size), time.Now().Add(waitTimeout), rec)
		defer release()
		wr.Imm = uint32(i)
		if err := rt.Post(wr); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	for range n {
		if res := rec.Wait(t, waitTimeout); res.Err != nil {
			t.Fatalf("PutWithImm %d: %v", res.WR.Imm, res.Err)
		}
	}
	for i := range n {
		checkEvent(t, inB.nextEvent(t), 1, backendtest.Slice(t, hb, i*size, size), uint32(i), la[i*size:(i+1)*size])
	}
	if st := rt.Stats(); st.Errors != 0 || st.InFlight != 0 {
		t.Errorf("route stats %+v", st)
	}
	if s := b.Served(); s.Ops != 4+n || s.Rejected != 0 {
		t.Errorf("owner served %+v, want %d ops", s, 4+n)
	}
}

// TestPutWithImmRefusals: what the owner's inbox refuses reaches the
// initiator's operation (its bytes did land), and the route goes on: no
// inbox or no subscriber (ErrNoReceive), a full queue (ErrLimit).
func TestPutWithImmRefusals(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	rt := connect(t, a, b) // before SetInbox: b has none yet
	ha, la := backendtest.Alloc(t, regA, 4096, buffer.AccessReadWrite)
	hb, lb := backendtest.Alloc(t, regB, 4096, accessNotifyW)
	backendtest.Random(t, la)
	if err := putImm(t, rt, regA, ha, hb, 1); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("PutWithImm to a backend without inbox: %v, want ErrNoReceive", err)
	}
	backendtest.AssertSame(t, "bytes of a refused PutWithImm", lb, la)

	b.SetInbox(newTestInbox(regB, 0, 0))
	if err := putImm(t, rt, regA, ha, hb, 2); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("PutWithImm without a subscriber: %v, want ErrNoReceive", err)
	}

	in := newTestInbox(regB, 2, 0)
	b.SetInbox(in)
	for i := range 2 {
		if err := putImm(t, rt, regA, ha, hb, uint32(i)); err != nil {
			t.Fatalf("PutWithImm %d: %v", i, err)
		}
	}
	if err := putImm(t, rt, regA, ha, hb, 3); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("PutWithImm to a full queue: %v, want ErrLimit", err)
	}
	in.nextEvent(t)
	if err := putImm(t, rt, regA, ha, hb, 4); err != nil {
		t.Fatalf("PutWithImm once the queue has room: %v", err)
	}
	in.nextEvent(t)
	if e := in.nextEvent(t); e.ev.Imm != 4 {
		t.Fatalf("event imm %d after the refusal, want 4", e.ev.Imm)
	}
	if rt.Err() != nil {
		t.Fatalf("route failed by refusals: %v", rt.Err())
	}
	if s := b.Served(); s.Ops != 3 || s.Rejected != 3 {
		t.Errorf("owner served %+v, want 3 ops and 3 refused", s)
	}
}

// TestPutWithImmRights: a handle without AccessNotify is refused at Post
// (nothing moves); one forged to claim it, or with a wrong key, is refused
// by the owner (no event; the route goes on); without AccessWrite the
// owner's device refuses the write itself.
func TestPutWithImmRights(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	in := newTestInbox(regB, 4, 0)
	b.SetInbox(in)
	rt := connect(t, a, b)
	ha, _ := backendtest.Alloc(t, regA, 4096, buffer.AccessReadWrite)
	hb, _ := backendtest.Alloc(t, regB, 4096, accessNotifyW)
	noNotify, lnn := backendtest.Alloc(t, regB, 4096, buffer.AccessReadWrite)
	backendtest.Random(t, lnn)
	before := bytes.Clone(lnn)
	wr, release := backendtest.NewWR(t, regA, backend.OpWriteImm, ha, noNotify, time.Now().Add(waitTimeout), backendtest.NewRecorder(1))
	defer release()
	if err := rt.Post(wr); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("PutWithImm with a handle without AccessNotify: %v, want ErrAccess at Post", err)
	}
	wr.Done.(*backendtest.Recorder).None(t)
	if !bytes.Equal(lnn, before) {
		t.Fatal("a PutWithImm refused at Post changed the buffer")
	}
	noNotify.Access |= buffer.AccessNotify // forged: the owner checks
	if err := putImm(t, rt, regA, ha, noNotify, 5); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("PutWithImm to a buffer without AccessNotify: %v, want ErrAccess", err)
	}
	badKey := hb
	badKey.Key[0] ^= 1
	if err := putImm(t, rt, regA, ha, badKey, 6); !errors.Is(err, rdmamgr.ErrBadKey) {
		t.Fatalf("PutWithImm with a wrong key: %v, want ErrBadKey", err)
	}
	in.noEvent(t)
	if rt.Err() != nil {
		t.Fatalf("route failed by refusals: %v", rt.Err())
	}
	if s := b.Served(); s.Ops != 0 || s.Rejected != 2 {
		t.Errorf("owner served %+v, want 2 refused", s)
	}

	readOnly, _ := backendtest.Alloc(t, regB, 4096, buffer.AccessRead|buffer.AccessNotify)
	readOnly.Access |= buffer.AccessWrite
	if err := putImm(t, rt, regA, ha, readOnly, 7); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("PutWithImm to a read-only buffer: %v, want ErrAccess", err)
	}
	in.noEvent(t)
}

// TestPutWithImmFlood: many PutWithImm in flight against a subscriber
// that does not keep up: each either delivers its event or fails with
// ErrLimit; nothing is lost silently. A stalled subscriber with a queue of
// 4 gets exactly 4 events; a slow one gets one per success.
func TestPutWithImmFlood(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	in := newTestInbox(regB, 4, 0)
	b.SetInbox(in)
	rt := connect(t, a, b)
	ha, _ := backendtest.Alloc(t, regA, 64, buffer.AccessReadWrite)
	hb, _ := backendtest.Alloc(t, regB, 64, accessNotifyW)
	flood := func(n int, slow bool) (ok, events int) {
		rec := backendtest.NewRecorder(n)
		for i := range n {
			wr, release := backendtest.NewWR(t, regA, backend.OpWriteImm, ha, hb, time.Now().Add(waitTimeout), rec)
			defer release()
			wr.Imm = uint32(i)
			if err := rt.Post(wr); err != nil {
				t.Fatalf("post %d: %v", i, err)
			}
		}
		var evc <-chan evSnap
		if slow {
			evc = in.events
		}
		last := -1
		take := func(e evSnap) {
			events++
			if int(e.ev.Imm) <= last {
				t.Fatalf("event %d after %d", e.ev.Imm, last)
			}
			last = int(e.ev.Imm)
		}
		for done := 0; done < n; {
			select {
			case res := <-rec.Results():
				done++
				switch {
				case res.Err == nil:
					ok++
				case !errors.Is(res.Err, rdmamgr.ErrLimit):
					t.Fatalf("PutWithImm %d: %v", res.WR.Imm, res.Err)
				}
			case e := <-evc:
				take(e)
				time.Sleep(time.Millisecond) // a slow subscriber
			case <-time.After(waitTimeout):
				t.Fatal("no completion")
			}
		}
		for len(in.events) > 0 {
			take(<-in.events)
		}
		return ok, events
	}
	if ok, events := flood(200, false); ok != 4 || events != 4 {
		t.Fatalf("stalled subscriber with a queue of 4: %d PutWithImm succeeded, %d events; want 4 and 4", ok, events)
	}
	ok, events := flood(200, true)
	t.Logf("slow subscriber: %d of 200 delivered", ok)
	if events != ok {
		t.Fatalf("%d events for %d successful PutWithImm", events, ok)
	}
}
