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

// sendWR returns a Send of local (with imm if hasImm) completing on done.
func sendWR(t testing.TB, reg *memreg.Registry, local buffer.Buffer, imm uint32, hasImm bool, done backend.Completer) (*backend.WorkRequest, func()) {
	t.Helper()
	wr, release := backendtest.NewWR(t, reg, backend.OpSend, local, buffer.Buffer{}, time.Now().Add(waitTimeout), done)
	wr.Imm, wr.HasImm = imm, hasImm
	return wr, release
}

// send runs one Send.
func send(t testing.TB, rt backend.Route, reg *memreg.Registry, local buffer.Buffer, imm uint32, hasImm bool) error {
	t.Helper()
	wr, release := sendWR(t, reg, local, imm, hasImm, nil)
	defer release()
	return backendtest.DoWR(t, waitTimeout, rt, wr)
}

// nextMsg returns the next message, failing the test if none comes.
func (in *testInbox) nextMsg(t testing.TB) testMsg {
	t.Helper()
	select {
	case m := <-in.msgs:
		return m
	case <-time.After(waitTimeout):
		t.Fatal("no message")
		return testMsg{}
	}
}

// TestSend: Send and SendWithImm land in the receive buffers the owner
// posted, in order, with their immediate value and the sender; up to the
// owner's MaxSend, and in order when more are in flight than credits.
func TestSend(t *testing.T) {
	requireDevices(t)
	cfgA := DefaultConfig()
	cfgA.RecvSlots = 3
	a, regA := started(t, cfgA, 1)
	cfgB := DefaultConfig()
	cfgB.MaxSend = 64 << 10
	b, regB := started(t, cfgB, 2)
	in := newTestInbox(regB, 0, 128)
	b.SetInbox(in)
	rt := connect(t, a, b)
	ha, la := backendtest.Alloc(t, regA, 64<<10, buffer.AccessReadWrite)
	backendtest.Random(t, la)
	for i, n := range []int{1, 100, 4096, 64 << 10} {
		in.post(64 << 10)
		hasImm := i%2 == 1
		if err := send(t, rt, regA, backendtest.Slice(t, ha, 0, n), uint32(1000+i), hasImm); err != nil {
			t.Fatalf("send of %d bytes: %v", n, err)
		}
		m := in.nextMsg(t)
		if m.peer != 1 || m.hasImm != hasImm || (hasImm && m.imm != uint32(1000+i)) || !bytes.Equal(m.data, la[:n]) {
			t.Fatalf("message %d: peer %x imm %d/%v, %d bytes; want %d bytes", i, m.peer, m.imm, m.hasImm, len(m.data), n)
		}
	}

	const n, size = 50, 512
	rec := backendtest.NewRecorder(n)
	for i := range n {
		in.post(size)
		wr, release := sendWR(t, regA, backendtest.Slice(t, ha, i*size, size), uint32(i), true, rec)
		defer release()
		if err := rt.Post(wr); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	for range n {
		if res := rec.Wait(t, waitTimeout); res.Err != nil {
			t.Fatalf("send %d: %v", res.WR.Imm, res.Err)
		}
	}
	for i := range n {
		m := in.nextMsg(t)
		if m.imm != uint32(i) || !bytes.Equal(m.data, la[i*size:(i+1)*size]) {
			t.Fatalf("message %d: imm %d, or its bytes differ", i, m.imm)
		}
	}
	if s := b.Served(); s.Ops != 4+n || s.BytesIn != 1+100+4096+64<<10+n*size || s.Rejected != 0 {
		t.Errorf("owner served %+v", s)
	}
}

// TestSendRefusals: no inbox, no subscriber or no receive buffer is
// ErrNoReceive, a buffer smaller than the message is ErrReceiveTooSmall
// (and stays posted), a message beyond the owner's MaxSend is ErrLimit
// before anything is posted; the route goes on.
func TestSendRefusals(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	rt := connect(t, a, b)
	ha, la := backendtest.Alloc(t, regA, 8192, buffer.AccessReadWrite)
	backendtest.Random(t, la)
	msg := backendtest.Slice(t, ha, 0, 100)
	if err := send(t, rt, regA, msg, 0, false); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("send to a backend without inbox: %v, want ErrNoReceive", err)
	}
	noSub := newTestInbox(regB, 0, 0)
	noSub.post(4096)
	b.SetInbox(noSub)
	if err := send(t, rt, regA, msg, 0, false); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("send without a subscriber: %v, want ErrNoReceive", err)
	}
	in := newTestInbox(regB, 0, 8)
	b.SetInbox(in)
	if err := send(t, rt, regA, msg, 0, false); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("send with no receive buffer posted: %v, want ErrNoReceive", err)
	}
	in.post(10)
	if err := send(t, rt, regA, msg, 0, false); !errors.Is(err, rdmamgr.ErrReceiveTooSmall) {
		t.Fatalf("send of 100 bytes into 10: %v, want ErrReceiveTooSmall", err)
	}
	if in.nPosted() != 1 {
		t.Fatalf("%d receive buffers posted after a refusal, want the 1 still there", in.nPosted())
	}
	if err := send(t, rt, regA, backendtest.Slice(t, ha, 0, 10), 7, true); err != nil {
		t.Fatalf("send of 10 bytes into 10: %v", err)
	}
	if m := in.nextMsg(t); !bytes.Equal(m.data, la[:10]) || m.imm != 7 || !m.hasImm {
		t.Fatalf("message %+v", m)
	}

	wr, release := sendWR(t, regA, backendtest.Slice(t, ha, 0, 4097), 0, false, backendtest.NewRecorder(1))
	defer release()
	if err := rt.Post(wr); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("send beyond the owner's MaxSend: %v, want ErrLimit", err)
	}
	wr.Done.(*backendtest.Recorder).None(t)
	if rt.Err() != nil {
		t.Fatalf("route failed by refusals: %v", rt.Err())
	}
	if s := b.Served(); s.Ops != 1 || s.Rejected != 4 {
		t.Errorf("owner served %+v, want 1 op and 4 refused", s)
	}
}

// TestSendsAndEventsInterleaved: Sends and PutWithImm on one route share
// its ring and credits; both arrive, each queue in posting order.
func TestSendsAndEventsInterleaved(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), 1)
	b, regB := started(t, DefaultConfig(), 2)
	in := newTestInbox(regB, 64, 64)
	b.SetInbox(in)
	rt := connect(t, a, b)
	ha, la := backendtest.Alloc(t, regA, 64*256, buffer.AccessReadWrite)
	hb, _ := backendtest.Alloc(t, regB, 64*256, accessNotifyW)
	backendtest.Random(t, la)
	const n = 64
	rec := backendtest.NewRecorder(n)
	for i := range n {
		local := backendtest.Slice(t, ha, i*256, 256)
		var wr *backend.WorkRequest
		var release func()
		if i%2 == 0 {
			in.post(256)
			wr, release = sendWR(t, regA, local, uint32(i), true, rec)
		} else {
			wr, release = backendtest.NewWR(t, regA, backend.OpWriteImm, local, backendtest.Slice(t, hb, i*256, 256), time.Now().Add(waitTimeout), rec)
			wr.Imm = uint32(i)
		}
		defer release()
		if err := rt.Post(wr); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	for range n {
		if res := rec.Wait(t, waitTimeout); res.Err != nil {
			t.Fatalf("%s %d: %v", res.WR.Op, res.WR.Imm, res.Err)
		}
	}
	for i := 0; i < n; i += 2 {
		if m := in.nextMsg(t); m.imm != uint32(i) || !bytes.Equal(m.data, la[i*256:(i+1)*256]) {
			t.Fatalf("message imm %d, want %d (or its bytes differ)", m.imm, i)
		}
		checkEvent(t, in.nextEvent(t), 1, backendtest.Slice(t, hb, (i+1)*256, 256), uint32(i+1), la[(i+1)*256:(i+2)*256])
	}
}
