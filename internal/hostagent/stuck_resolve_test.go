//go:build linux

package hostagent

import (
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// While one process's first mapping stalls a connection between two
// agents (its owner code is stuck, so the far agent's Resolve waits up to
// shm's 5 s bound), the route between the agents stays up, past the
// initiator's PeerTimeout (4 s): another process's operations on it are
// served before and after the stall, none fails. (The silent connection
// once failed the whole route, and every process's operations with it.)
func TestStuckResolveKeepsNeighbours(t *testing.T) {
	b, p1, p2, p4, in, free := stuckOwnerAgents(t)

	src, _ := p1.alloc(t, 4096, buffer.AccessReadWrite)
	r2, _ := p2.alloc(t, 4096, buffer.AccessReadWrite)
	r4, _ := p4.alloc(t, 4096, buffer.AccessReadWrite)
	get4 := func(wrid uint64) agentwire.Post {
		return agentwire.Post{WRID: wrid, Op: backend.OpRead, Via: p4.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p4.welcome.AgentID, Local: localOf(src), Remote: r4}
	}
	// p4's region mapped and the route up before the stall.
	p1.post(t, get4(100))
	if d := p1.dones(t, 1)[100]; d.Code != 0 {
		t.Fatalf("warm-up get: %v", rdmapb.Code(d.Code))
	}
	msg := localOf(src)
	msg.Length = 64
	p1.post(t, agentwire.Post{WRID: 1, Op: backend.OpSend, Via: p2.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p2.welcome.AgentID, Local: msg})
	<-in.entered // p2's owner code is stuck in Recv: it answers nothing
	// A Put needing p2's region's first mapping stalls its connection.
	p1.post(t, agentwire.Post{WRID: 2, Op: backend.OpWrite, Via: p2.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: r2})
	// p4's Gets, one at a time, until the stalled Put is answered, and one
	// more after it.
	next, gets, stalled := uint64(1000), 0, true
	p1.post(t, get4(next))
	for stalled || gets == 0 {
		for wrid, d := range p1.dones(t, 1) {
			switch {
			case wrid == 1 || wrid == 2:
				stalled = stalled && wrid != 2
			case wrid != next:
				t.Fatalf("done for wrid %d", wrid)
			case d.Code != 0:
				t.Fatalf("p4's get %d, posted while p2's mapping stalled, failed: %v", wrid, rdmapb.Code(d.Code))
			default:
				gets++
				next++
				p1.post(t, get4(next))
			}
		}
	}
	for done := false; !done; {
		for wrid, d := range p1.dones(t, 1) {
			if wrid == next {
				if d.Code != 0 {
					t.Fatalf("p4's get %d, posted while p2's mapping stalled or just after, failed: %v", wrid, rdmapb.Code(d.Code))
				}
				done = true
			}
		}
	}
	t.Logf("%d gets of p4's region while p2's mapping stalled, none failed", gets)
	free()
}
