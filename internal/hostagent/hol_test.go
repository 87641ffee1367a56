//go:build linux

package hostagent

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// silentInbox is a process that does not answer its event notices (its
// owner code waits in Event) until released.
type silentInbox struct {
	entered chan struct{} // one per Event that waits
	release chan struct{}
	once    sync.Once
}

func (in *silentInbox) Event(ev backend.Event) error {
	in.entered <- struct{}{}
	<-in.release
	return nil
}

func (in *silentInbox) Recv(peer, n uint64) (backend.Landing, error) {
	return nil, rdmamgr.ErrNoReceive
}

func (in *silentInbox) free() { in.once.Do(func() { close(in.release) }) }

// A process that does not answer its events holds up only its own: the
// connection between the two agents serves on, so another process's Put
// and PutWithImm through the same agents complete while the stuck one's
// event waits; past noticeQueue waiting events, one more for the stuck
// process is refused at once with LIMIT (the direct path's overflow),
// and the ones queued are answered once it answers.
func TestSlowProcessDoesNotStallTheAgents(t *testing.T) {
	defer noticeQueue.Store(noticeQueue.Load())
	noticeQueue.Store(2)
	_, b, p1, p2 := pairOfAgents(t)
	stuck := &silentInbox{entered: make(chan struct{}, 8), release: make(chan struct{})}
	p2.sb.SetInbox(stuck)
	t.Cleanup(stuck.free)
	p4 := newFakeProc(t, b.cfg.Secret)
	if err := p4.attach(testCtx(t), b.cfg.Socket, attachOpts{secret: b.cfg.Secret}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p4.c.Close() })
	in4 := &testInbox{events: make(chan backend.Event, 4), msgs: make(chan []byte, 4), peers: make(chan uint64, 4)}
	p4.sb.SetInbox(in4)

	src, _ := p1.alloc(t, 4096, buffer.AccessReadWrite)
	dst2, _ := p2.alloc(t, 4096, buffer.AccessReadWrite|buffer.AccessNotify)
	dst4, _ := p4.alloc(t, 4096, buffer.AccessReadWrite|buffer.AccessNotify)
	to2 := agentwire.Post{Op: backend.OpWriteImm, Via: p2.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: dst2}
	to4 := agentwire.Post{Via: p4.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p4.welcome.AgentID, Local: localOf(src), Remote: dst4}

	to2.WRID = 1
	p1.post(t, to2)
	<-stuck.entered // the agent waits for p2's answer to event 1
	to2.WRID = 2
	p1.post(t, to2) // queued
	to2.WRID = 3
	p1.post(t, to2) // queued: the queue of 2 is full
	to2.WRID = 4
	p1.post(t, to2) // refused at once
	w, wi := to4, to4
	w.WRID, w.Op = 10, backend.OpWrite
	wi.WRID, wi.Op, wi.Imm = 11, backend.OpWriteImm, 7
	p1.post(t, w, wi)

	got := map[uint64]agentwire.Done{}
	buf := make([]byte, agentwire.MaxPacket)
	var ds []agentwire.Done
	for got[10].WRID == 0 || got[11].WRID == 0 || got[4].WRID == 0 {
		pkt, err := agentwire.ReadPacket(p1.c, buf)
		if err != nil {
			t.Fatal(err)
		}
		if ds, err = agentwire.DecodeDones(pkt, ds); err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.WRID <= 3 {
				t.Fatalf("event %d for the stuck process answered (%v) before the other process's operations: they waited for it", d.WRID, rdmapb.Code(d.Code))
			}
			got[d.WRID] = d
		}
	}
	if got[10].Code != 0 || got[11].Code != 0 {
		t.Fatalf("the other process's put, put-with-imm: %v, %v", rdmapb.Code(got[10].Code), rdmapb.Code(got[11].Code))
	}
	if ev := <-in4.events; ev.Imm != 7 || ev.Peer != p1.id {
		t.Fatalf("the other process's event: %+v", ev)
	}
	if err := backend.Sentinel(rdmapb.Code(got[4].Code)); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("an event past the stuck process's queue: %v, want LIMIT", err)
	}
	stuck.free()
	for wrid, d := range p1.dones(t, 3) {
		if d.Code != 0 {
			t.Fatalf("queued event %d once the process answers: %v", wrid, rdmapb.Code(d.Code))
		}
	}
}

// A process that leaves a map request unanswered (its owner code is
// stuck: here in a message's Recv) holds up the shared connection's
// frame that needed the mapping once, up to the resolve's bound: its shm
// route fails on the silence (shm's mapTimeout), which ends the process
// at its agent, so later frames for it are refused at once (PEER_GONE)
// and other processes' traffic serves on.
func TestStuckProcessIsEnded(t *testing.T) {
	b, p1, p2, p4, in, free := stuckOwnerAgents(t)

	src, _ := p1.alloc(t, 4096, buffer.AccessReadWrite)
	r1, _ := p2.alloc(t, 4096, buffer.AccessReadWrite)
	r2, _ := p2.alloc(t, 4096, buffer.AccessReadWrite)
	r4, _ := p4.alloc(t, 4096, buffer.AccessReadWrite)
	msg := localOf(src)
	msg.Length = 64
	p1.post(t, agentwire.Post{WRID: 1, Op: backend.OpSend, Via: p2.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p2.welcome.AgentID, Local: msg})
	<-in.entered // p2's owner code is stuck in Recv: it answers nothing
	p1.post(t, agentwire.Post{WRID: 2, Op: backend.OpWrite, Via: p2.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: r1})
	ds := p1.dones(t, 2)
	if ds[2].Code == 0 {
		t.Fatal("put needing a mapping of a stuck process succeeded")
	}
	waitFor(t, fmt.Sprintf("the stuck process to be ended (the put failed with %v)", rdmapb.Code(ds[2].Code)), func() bool { _, err := b.procAt(p2.welcome.Slot); return err != nil })
	p1.post(t,
		agentwire.Post{WRID: 3, Op: backend.OpWrite, Via: p2.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: r2},
		agentwire.Post{WRID: 4, Op: backend.OpWrite, Via: p4.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p4.welcome.AgentID, Local: localOf(src), Remote: r4})
	ds = p1.dones(t, 2)
	if ds[3].Code != uint32(rdmapb.Code_PEER_GONE) || ds[4].Code != 0 {
		t.Fatalf("put to the ended process: %v (want PEER_GONE); to another: %v", rdmapb.Code(ds[3].Code), rdmapb.Code(ds[4].Code))
	}
	free()
}

// stuckOwnerAgents is pairOfAgents with p2's owner code stuck in a
// message's Recv once one comes (in.entered; free lets it go, and runs at
// cleanup) and a second process p4 attached to p2's agent b.
func stuckOwnerAgents(t *testing.T) (b *Agent, p1, p2, p4 *fakeProc, in *stuckInbox, free func()) {
	t.Helper()
	_, b, p1, p2 = pairOfAgents(t)
	in = &stuckInbox{entered: make(chan struct{}), free: make(chan struct{})}
	var freeOnce sync.Once
	free = func() { freeOnce.Do(func() { close(in.free) }) }
	t.Cleanup(free)
	p2.sb.SetInbox(in)
	p4 = newFakeProc(t, b.cfg.Secret)
	if err := p4.attach(testCtx(t), b.cfg.Socket, attachOpts{secret: b.cfg.Secret}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p4.c.Close() })
	return b, p1, p2, p4, in, free
}
