//go:build linux

package hostagent

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

func newTestInbox() *testInbox {
	return &testInbox{events: make(chan backend.Event, 4), msgs: make(chan []byte, 4), peers: make(chan uint64, 4), recv: make([]byte, 4096)}
}

// A far agent restarts at the same actor address and hands the slot of a
// process of its former life (P2) to another (P3): a post that still
// names the old slot (an idle route of P1's to P2) names the old agent's
// id, so agent A answers PEER_GONE (ending P1's route) and P3 receives
// nothing; a post naming the new agent's id reaches P3.
func TestSlotOfARestartedAgent(t *testing.T) {
	secret := testSecret(t)
	sys := newSystem(t)
	a := startAgent(t, sys, "agentA", 1, secret)
	b := startAgent(t, sys, "agentB", 2, secret)
	ctx := testCtx(t)
	p1, p2 := newFakeProc(t, secret), newFakeProc(t, secret)
	if err := p1.attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	if err := p2.attach(ctx, b.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p1.c.Close(); p2.c.Close() })
	in2 := newTestInbox()
	p2.sb.SetInbox(in2)
	src, srcMem := p1.alloc(t, 4096, buffer.AccessReadWrite)
	msg := localOf(src)
	msg.Length = 100
	via, far, farID := p2.welcome.Slot, b.Addr(), p2.welcome.AgentID
	p1.post(t, agentwire.Post{WRID: 1, Op: backend.OpSend, Via: via, FarAgent: far, FarAgentID: farID, Local: msg})
	if d := p1.dones(t, 1)[1]; d.Code != 0 {
		t.Fatalf("send to P2: %v", rdmapb.Code(d.Code))
	}
	if got := <-in2.msgs; !bytes.Equal(got, srcMem[:100]) {
		t.Fatal("send to P2: bytes differ")
	}
	old, _ := a.cachedFar(far, pinOf(p1.welcome.Slot, via))
	if old == nil {
		t.Fatal("no far route after a send")
	}

	// Agent B restarts: a new manager of the same name on the same
	// system (the same actor address), a new attach socket (P2 stays
	// off it: P3 takes the first slot, P2's old one).
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.mgr.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Done():
	case <-time.After(testTimeout):
		t.Fatal("A's route to the old agent B stays up")
	}
	b2 := startAgent(t, sys, "agentB", 2, secret)
	if b2.Addr() != far || b2.mgr.ID() == farID {
		t.Fatalf("new agent B at %s id %016x, old at %s id %016x: want the same address, another id", b2.Addr(), b2.mgr.ID(), far, farID)
	}
	p3 := newFakeProc(t, secret)
	if err := p3.attach(ctx, b2.cfg.Socket, attachOpts{secret: secret}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p3.c.Close() })
	if p3.welcome.Slot != via {
		t.Fatalf("P3 at slot %d, want P2's old %d", p3.welcome.Slot, via)
	}
	in3 := newTestInbox()
	p3.sb.SetInbox(in3)

	// P1's route to P2 posts as before: refused, P3 untouched.
	p1.post(t, agentwire.Post{WRID: 2, Op: backend.OpSend, Via: via, FarAgent: far, FarAgentID: farID, Local: msg})
	d := p1.dones(t, 1)[2]
	if err := d.Err(backend.OpSend); !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("send on the old slot after the restart: %v, want peer gone", err)
	}
	select {
	case got := <-in3.msgs:
		t.Fatalf("P3 received %d bytes meant for P2", len(got))
	case <-time.After(50 * time.Millisecond):
	}

	// A route set up afresh (naming the new agent) reaches P3.
	p1.post(t, agentwire.Post{WRID: 3, Op: backend.OpSend, Via: p3.welcome.Slot, FarAgent: far, FarAgentID: p3.welcome.AgentID, Local: msg})
	if d := p1.dones(t, 1)[3]; d.Code != 0 {
		t.Fatalf("send to P3: %v", rdmapb.Code(d.Code))
	}
	if got, peer := <-in3.msgs, <-in3.peers; !bytes.Equal(got, srcMem[:100]) || peer != p1.id {
		t.Fatalf("send to P3: %d bytes from %x", len(got), peer)
	}
}
