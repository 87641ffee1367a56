//go:build linux

package hostagent

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// testInbox records events and takes messages into one posted buffer.
type testInbox struct {
	events chan backend.Event
	msgs   chan []byte
	peers  chan uint64
	mu     sync.Mutex
	recv   []byte // the posted receive buffer, nil: none (mu)
}

func (in *testInbox) Event(ev backend.Event) error {
	select {
	case in.events <- ev:
		return nil
	default:
		return rdmamgr.ErrLimit
	}
}

func (in *testInbox) Recv(peer, n uint64) (backend.Landing, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.recv == nil {
		return nil, rdmamgr.ErrNoReceive
	}
	if uint64(len(in.recv)) < n {
		return nil, rdmamgr.ErrReceiveTooSmall
	}
	in.peers <- peer
	return &testLanding{in: in, mem: in.recv}, nil
}

type testLanding struct {
	in  *testInbox
	mem []byte
}

func (l *testLanding) Mem() []byte { return l.mem }
func (l *testLanding) Done(n int, imm uint32, hasImm bool, err error) {
	if err == nil {
		l.in.msgs <- append([]byte(nil), l.mem[:n]...)
	}
}

// A PutWithImm's bytes land in the target's region and its event reaches
// the target's inbox naming the initiating process (not an agent), in
// order after the Put before it; a Send's message reaches the target's
// receive buffer naming it too; a message with no receive posted and an
// event nobody takes are refused back to the initiator.
func TestExecutorEventsAndSends(t *testing.T) {
	_, b, p1, p2 := pairOfAgents(t)
	in := &testInbox{events: make(chan backend.Event, 4), msgs: make(chan []byte, 4), peers: make(chan uint64, 4), recv: make([]byte, 4096)}
	p2.sb.SetInbox(in)
	src, srcMem := p1.alloc(t, 8192, buffer.AccessReadWrite)
	dst, dstMem := p2.alloc(t, 8192, buffer.AccessReadWrite|buffer.AccessNotify)
	via, far := p2.welcome.Slot, b.Addr()
	first, _ := dst.Slice(0, 4096)
	second, _ := dst.Slice(4096, 4096)
	l1, l2 := localOf(src), localOf(src)
	l1.Length, l2.Offset, l2.Length = 4096, 4096, 4096
	p1.post(t,
		agentwire.Post{WRID: 1, Op: backend.OpWrite, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: l1, Remote: first},
		agentwire.Post{WRID: 2, Op: backend.OpWriteImm, Imm: 99, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: l2, Remote: second})
	ds := p1.dones(t, 2)
	if ds[1].Code != 0 || ds[2].Code != 0 {
		t.Fatalf("put, put-with-imm: %+v", ds)
	}
	ev := <-in.events
	if ev.Peer != p1.id || ev.Region != dst.Region || ev.Offset != 4096 || ev.Length != 4096 || ev.Imm != 99 {
		t.Fatalf("event %+v, want peer %x region %d [4096,+4096) imm 99", ev, p1.id, dst.Region)
	}
	if !bytes.Equal(srcMem, dstMem) {
		t.Fatal("bytes differ")
	}

	msg := localOf(src)
	msg.Length = 100
	p1.post(t, agentwire.Post{WRID: 3, Op: backend.OpSend, HasImm: true, Imm: 5, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: msg})
	if d := p1.dones(t, 1)[3]; d.Code != 0 {
		t.Fatalf("send: %v", rdmapb.Code(d.Code))
	}
	if got, peer := <-in.msgs, <-in.peers; !bytes.Equal(got, srcMem[:100]) || peer != p1.id {
		t.Fatalf("message of %d bytes from %x, want 100 from %x", len(got), peer, p1.id)
	}

	in.mu.Lock()
	in.recv = nil // no receive posted: the sender hears of it
	in.mu.Unlock()
	p1.post(t, agentwire.Post{WRID: 5, Op: backend.OpSend, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: msg})
	if d := p1.dones(t, 1)[5]; d.Code != uint32(rdmapb.Code_NO_RECEIVE) {
		t.Fatalf("send without a receive posted: %v", rdmapb.Code(d.Code))
	}

	for range cap(in.events) { // fill the subscriber's queue: the next is refused
		in.events <- backend.Event{}
	}
	p1.post(t, agentwire.Post{WRID: 4, Op: backend.OpWriteImm, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: l2, Remote: second})
	if d := p1.dones(t, 1)[4]; !errors.Is(backend.Sentinel(rdmapb.Code(d.Code)), rdmamgr.ErrLimit) {
		t.Fatalf("event refused by the subscriber: %v", rdmapb.Code(d.Code))
	}
}
