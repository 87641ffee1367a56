//go:build linux

package hostagent

import (
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Slots are handed out once in an agent's life, with generation 1: a
// gone process's slot answers ErrPeerGone for good, and once every slot
// was handed out an attach is refused (ErrLimit), never given an old one.
func TestSlots(t *testing.T) {
	secret := testSecret(t)
	a := startAgent(t, newSystem(t), "agentA", 1, secret)
	ctx := testCtx(t)
	f1, f2 := newFakeProc(t, secret), newFakeProc(t, secret)
	if err := f1.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	if err := f2.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	// f2 is not used again until the end: without a reference, a
	// collection may finalize its socket (closing it) and the agent drop
	// slot 2, as one run did.
	t.Cleanup(func() { f2.c.Close() })
	if f1.welcome.Slot != 1 || f2.welcome.Slot != 2 {
		t.Fatalf("slots %d, %d", f1.welcome.Slot, f2.welcome.Slot)
	}
	f1.c.Close()
	waitFor(t, "slot 1 to be dropped", func() bool { _, err := a.procAt(1); return errors.Is(err, rdmamgr.ErrPeerGone) })
	if err := f1.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	if w := f1.welcome; w.Slot != 3 || w.Generation != 1 {
		t.Fatalf("re-attach got slot %d generation %d, want 3, 1", w.Slot, w.Generation)
	}
	f1.c.Close()
	waitFor(t, "slot 3 to be dropped", func() bool { return a.Procs() == 1 })
	a.mu.Lock()
	a.next = 0xffff // the last slot
	a.mu.Unlock()
	if err := f1.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	if w := f1.welcome; w.Slot != 0xffff || w.Generation != 1 {
		t.Fatalf("slot %d generation %d, want 65535, 1", w.Slot, w.Generation)
	}
	f1.c.Close()
	waitFor(t, "the slot to be dropped", func() bool { return a.Procs() == 1 })
	if err := f1.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("attach after every slot was handed out: %v (slot %d), want ErrLimit", err, f1.welcome.Slot)
	}
	for _, s := range []uint16{1, 3, 0xffff} {
		if _, err := a.procAt(s); !errors.Is(err, rdmamgr.ErrPeerGone) {
			t.Fatalf("slot %d of a gone process: %v, want ErrPeerGone", s, err)
		}
	}
	if _, err := (*resolver)(a).Inbox(2); err != nil {
		t.Fatalf("slot 2, still attached: %v", err)
	}
}

// A far process's route to a process that left, idle while its agent
// handed out every other slot, still names the gone slot: its Send (no
// key needed) answers PEER_GONE and reaches no process attached since.
func TestStaleSlotReachesNoNewProcess(t *testing.T) {
	_, b, p1, p2 := pairOfAgents(t)
	secret := b.cfg.Secret
	in := &testInbox{events: make(chan backend.Event, 4), msgs: make(chan []byte, 4), peers: make(chan uint64, 4), recv: make([]byte, 4096)}
	p2.sb.SetInbox(in)
	src, _ := p1.alloc(t, 4096, buffer.AccessReadWrite)
	msg := localOf(src)
	msg.Length = 64
	via, far := p2.welcome.Slot, b.Addr()
	send := func(wrid uint64) rdmapb.Code {
		p1.post(t, agentwire.Post{WRID: wrid, Op: backend.OpSend, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: msg})
		return rdmapb.Code(p1.dones(t, 1)[wrid].Code)
	}
	if c := send(1); c != 0 {
		t.Fatalf("send: %v", c)
	}
	<-in.msgs
	<-in.peers
	p2.c.Close()
	waitFor(t, "B to drop P2", func() bool { return b.Procs() == 0 })
	b.mu.Lock()
	b.next = 0xffff // every other slot was handed out meanwhile
	b.mu.Unlock()
	p3 := newFakeProc(t, secret)
	in3 := &testInbox{events: make(chan backend.Event, 4), msgs: make(chan []byte, 4), peers: make(chan uint64, 4), recv: make([]byte, 4096)}
	p3.sb.SetInbox(in3)
	ctx := testCtx(t)
	for range 2 {
		if err := p3.attach(ctx, b.cfg.Socket, attachOpts{secret: secret}); err != nil {
			if !errors.Is(err, rdmamgr.ErrLimit) {
				t.Fatal(err)
			}
			break
		}
		if p3.welcome.Slot == via {
			break // the old code: the gone process's slot handed out again
		}
		p3.c.Close()
		waitFor(t, "B to drop P3", func() bool { return b.Procs() == 0 })
	}
	if p3.c != nil {
		t.Cleanup(func() { p3.c.Close() })
	}
	if c := send(2); c != rdmapb.Code_PEER_GONE {
		t.Fatalf("send to the gone process's slot: %v, want PEER_GONE", c)
	}
	select {
	case m := <-in3.msgs:
		t.Fatalf("a message of %d bytes for the gone process reached the new one at slot %d", len(m), p3.welcome.Slot)
	default:
	}
}

// The target process going (its socket closes) drops its slot and
// releases its proxies at its agent: the initiator's next operations on
// it fail with PEER_GONE. The initiator going releases its own proxies
// at its agent.
func TestProcessGone(t *testing.T) {
	a, b, p1, p2 := pairOfAgents(t)
	src, _ := p1.alloc(t, 4096, buffer.AccessReadWrite)
	dst, _ := p2.alloc(t, 4096, buffer.AccessReadWrite)
	via, far := p2.welcome.Slot, b.Addr()
	p1.post(t, agentwire.Post{WRID: 1, Op: backend.OpWrite, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: dst})
	if d := p1.dones(t, 1)[1]; d.Code != 0 {
		t.Fatalf("put: %v", rdmapb.Code(d.Code))
	}
	if a.reg.Stats().Regions != 1 || b.reg.Stats().Regions != 1 {
		t.Fatalf("proxies: %d at A, %d at B, want 1 and 1", a.reg.Stats().Regions, b.reg.Stats().Regions)
	}
	p2.c.Close()
	waitFor(t, "B to release P2's proxy", func() bool { return b.reg.Stats().Regions == 0 && b.Procs() == 0 })
	p1.post(t, agentwire.Post{WRID: 2, Op: backend.OpWrite, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: dst})
	if d := p1.dones(t, 1)[2]; d.Code != uint32(rdmapb.Code_PEER_GONE) {
		t.Fatalf("put to a gone process: %v", rdmapb.Code(d.Code))
	}
	p1.c.Close()
	waitFor(t, "A to release P1's proxy", func() bool { return a.reg.Stats().Regions == 0 && a.Procs() == 0 })
}

// The owner revoking its region sends the agent a cut notice: the agent
// releases its proxy at once, so the owner's Revoke does not wait out
// the 2 s give-up, and later operations on the region are refused.
func TestCutReleasesProxy(t *testing.T) {
	_, b, p1, p2 := pairOfAgents(t)
	src, _ := p1.alloc(t, 4096, buffer.AccessReadWrite)
	dst, _ := p2.alloc(t, 4096, buffer.AccessReadWrite)
	via, far := p2.welcome.Slot, b.Addr()
	p1.post(t, agentwire.Post{WRID: 1, Op: backend.OpWrite, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: dst})
	if d := p1.dones(t, 1)[1]; d.Code != 0 {
		t.Fatalf("put: %v", rdmapb.Code(d.Code))
	}
	start := time.Now()
	if err := p2.reg.Revoke(testCtx(t), dst); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B to release the proxy", func() bool { return b.reg.Stats().Regions == 0 })
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Logf("revoke took %v (the cut notice should make it prompt)", d)
	}
	p1.post(t, agentwire.Post{WRID: 2, Op: backend.OpWrite, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: dst})
	d := p1.dones(t, 1)[2]
	if err := backend.Sentinel(rdmapb.Code(d.Code)); !errors.Is(err, rdmamgr.ErrRevoked) && !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("put to a revoked region: %v", rdmapb.Code(d.Code))
	}
}

// Close tells every attached process it goes (gone), and the processes'
// sockets then end.
func TestCloseSendsGone(t *testing.T) {
	secret := testSecret(t)
	a := startAgent(t, newSystem(t), "agentA", 1, secret)
	ctx := testCtx(t)
	f := newFakeProc(t, secret)
	if err := f.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Close() }()
	buf := make([]byte, agentwire.MaxPacket)
	pkt, err := agentwire.ReadPacket(f.c, buf)
	if err != nil {
		t.Fatal(err)
	}
	g, err := agentwire.DecodeGone(pkt)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(g.Err(), rdmamgr.ErrClosed) {
		t.Fatalf("gone: %v", g.Err())
	}
	if _, err := agentwire.ReadPacket(f.c, buf); err == nil {
		t.Fatal("socket open after gone")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
