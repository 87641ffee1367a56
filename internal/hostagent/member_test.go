//go:build linux

package hostagent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/etcdtest"
	"github.com/rdmamgr/rdmamgr/membership"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// stuckInbox holds a message's receive until freed: the far agent's Send
// to its process stays in flight.
type stuckInbox struct {
	entered chan struct{}
	free    chan struct{}
	once    sync.Once
}

func (in *stuckInbox) Event(backend.Event) error { return nil }
func (in *stuckInbox) Recv(peer, n uint64) (backend.Landing, error) {
	in.once.Do(func() { close(in.entered) })
	<-in.free
	return nil, rdmamgr.ErrNoReceive
}

// dropper is the manager Follow drops routes of, telling the test which
// addresses it dropped.
type dropper struct {
	membership.PeerDropper
	dropped chan string
}

func (d *dropper) DropPeer(addr, why string) int {
	n := d.PeerDropper.DropPeer(addr, why)
	d.dropped <- addr
	return n
}

// A far agent whose host leaves etcd membership (its record goes: here a
// clean stop) has our agent's shared route to it ended by Follow: the
// process's operation in flight through it fails with PEER_GONE
// (errors.Is ErrPeerGone; without the drop it would end NO_RECEIVE, the
// far process's answer once freed), and the route is no longer the
// cached one.
// Both agents share one actor system here, so Follow is told another
// self address; DropPeer of that address is the far agent's routes.
func TestMemberLeftEndsFarRoute(t *testing.T) {
	ep := etcdtest.Start(t)
	a, b, p1, p2 := pairOfAgents(t)
	in := &stuckInbox{entered: make(chan struct{}), free: make(chan struct{})}
	var freeOnce sync.Once
	free := func() { freeOnce.Do(func() { close(in.free) }) }
	defer free()
	p2.sb.SetInbox(in)
	ctx := testCtx(t)

	reg := func() *membership.Registry {
		r, err := membership.Open(membership.Config{Endpoints: []string{ep}, Cluster: "agn", TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	regA, regB := reg(), reg()
	d := &dropper{PeerDropper: a.mgr, dropped: make(chan string, 16)}
	fctx, stop := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() { defer close(followed); _ = regA.Follow(fctx, "self.invalid:1", d, nil) }()
	defer func() { stop(); <-followed }()
	// Follow is watching once a probe member's leaving reaches it.
	for i := 0; ; i++ {
		g, err := regB.Register(ctx, membership.Member{Name: "probe", Address: "probe.invalid:1"})
		if err != nil {
			t.Fatal(err)
		}
		g.Close()
		select {
		case addr := <-d.dropped:
			if addr != "probe.invalid:1" {
				t.Fatalf("dropped %s", addr)
			}
		case <-time.After(2 * membership.LeaveGrace):
			if i < 20 {
				continue
			}
			t.Fatal("Follow never saw a member leave")
		}
		break
	}

	host, _ := splitAddr(b.Addr())
	g, err := regB.Register(ctx, membership.Member{Name: "agentB", Address: host})
	if err != nil {
		t.Fatal(err)
	}
	src, _ := p1.alloc(t, 4096, buffer.AccessReadWrite)
	dst, _ := p2.alloc(t, 4096, buffer.AccessReadWrite)
	via, far := p2.welcome.Slot, b.Addr()
	p1.post(t, agentwire.Post{WRID: 1, Op: backend.OpWrite, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: dst})
	if d := p1.dones(t, 1)[1]; d.Code != 0 {
		t.Fatalf("put: %v", rdmapb.Code(d.Code))
	}
	route, _ := a.cachedFar(far, pinOf(p1.welcome.Slot, via))
	if route == nil {
		t.Fatal("no far route after a put")
	}
	msg := localOf(src)
	msg.Length = 100
	p1.post(t, agentwire.Post{WRID: 2, Op: backend.OpSend, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: msg})
	select {
	case <-in.entered: // the Send waits at B's process: in flight
	case <-ctx.Done():
		t.Fatal("the send never reached the far process")
	}
	g.Close() // B's host leaves
	if addr := <-d.dropped; addr != host {
		t.Fatalf("dropped %s, want %s", addr, host)
	}
	// B's process answers now (no receive posted): had the route not
	// ended, the sender would hear NO_RECEIVE.
	free()
	done := p1.dones(t, 1)[2]
	if err := backend.Sentinel(rdmapb.Code(done.Code)); !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("send in flight when the far host left: %v", rdmapb.Code(done.Code))
	}
	select {
	case <-route.Done():
	default:
		t.Fatal("the far route is up after its host left")
	}
	if r, _ := a.cachedFar(far, pinOf(p1.welcome.Slot, via)); r != nil {
		t.Fatal("the ended far route is still cached")
	}
}
