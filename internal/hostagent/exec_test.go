//go:build linux

package hostagent

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Put, Get and the atomics of a process attached to agent A on the memory
// of a process attached to agent B: through A's executor, the one TCP
// route A-B, B's resolver and proxies; every byte checked, and a wrong
// key refused without touching the target.
func TestExecutorVerbs(t *testing.T) {
	_, b, p1, p2 := pairOfAgents(t)
	const n = 300 << 10
	src, srcMem := p1.alloc(t, n, buffer.AccessReadWrite)
	dst, dstMem := p2.alloc(t, n, buffer.AccessReadWrite|buffer.AccessAtomic|buffer.AccessNotify)
	rw, _ := p2.alloc(t, 64, buffer.AccessReadWrite)
	back, backMem := p1.alloc(t, n, buffer.AccessReadWrite)
	via, far := p2.welcome.Slot, b.Addr()
	p1.post(t, agentwire.Post{WRID: 1, Op: backend.OpWrite, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: dst})
	if d := p1.dones(t, 1)[1]; d.Code != 0 {
		t.Fatalf("put: %v", rdmapb.Code(d.Code))
	}
	if !bytes.Equal(srcMem, dstMem) {
		t.Fatal("put: bytes differ")
	}
	p1.post(t, agentwire.Post{WRID: 2, Op: backend.OpRead, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: localOf(back), Remote: dst})
	if d := p1.dones(t, 1)[2]; d.Code != 0 {
		t.Fatalf("get: %v", rdmapb.Code(d.Code))
	}
	if !bytes.Equal(backMem, dstMem) {
		t.Fatal("get: bytes differ")
	}

	word, _ := dst.Slice(64, 8)
	binary.LittleEndian.PutUint64(dstMem[64:], 40)
	p1.post(t,
		agentwire.Post{WRID: 3, Op: backend.OpFetchAdd, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Remote: word, Swap: 2},
		agentwire.Post{WRID: 4, Op: backend.OpCompareSwap, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Remote: word, Compare: 42, Swap: 7})
	ds := p1.dones(t, 2)
	if ds[3].Code != 0 || ds[3].Result != 40 || ds[4].Code != 0 || ds[4].Result != 42 {
		t.Fatalf("atomics: %+v", ds)
	}
	if got := binary.LittleEndian.Uint64(dstMem[64:]); got != 7 {
		t.Fatalf("word %d after fetch-add and compare-swap, want 7", got)
	}
	rwWord, _ := rw.Slice(0, 8)
	p1.post(t, agentwire.Post{WRID: 30, Op: backend.OpFetchAdd, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Remote: rwWord, Swap: 1})
	if d := p1.dones(t, 1)[30]; d.Code != uint32(rdmapb.Code_ACCESS_DENIED) {
		t.Fatalf("atomic on a region without atomic access: %v", rdmapb.Code(d.Code))
	}

	before := append([]byte(nil), dstMem...)
	bad := dst
	bad.Key[0] ^= 1
	p1.post(t, agentwire.Post{WRID: 5, Op: backend.OpWrite, Via: via, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: bad})
	if d := p1.dones(t, 1)[5]; d.Code != uint32(rdmapb.Code_RELEASED) {
		t.Fatalf("wrong key: %v", rdmapb.Code(d.Code))
	}
	p1.post(t, agentwire.Post{WRID: 6, Op: backend.OpWrite, Via: via + 1, FarAgent: far, FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: dst})
	if d := p1.dones(t, 1)[6]; d.Code != uint32(rdmapb.Code_PEER_GONE) {
		t.Fatalf("no process at via: %v", rdmapb.Code(d.Code))
	}
	if !bytes.Equal(before, dstMem) {
		t.Fatal("a refused put changed the target")
	}
}

// A process past its operations in flight at the agent has the next post
// refused with RESOURCE_EXHAUSTED, and the ones after room is back run.
func TestExecutorLimit(t *testing.T) {
	_, b, p1, p2 := pairOfAgents(t)
	src, _ := p1.alloc(t, 64, buffer.AccessReadWrite)
	dst, _ := p2.alloc(t, 64, buffer.AccessReadWrite)
	old := maxOps.Load()
	maxOps.Store(0)
	post := agentwire.Post{WRID: 1, Op: backend.OpWrite, Via: p2.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: dst}
	p1.post(t, post)
	d := p1.dones(t, 1)[1]
	maxOps.Store(old)
	if d.Code != uint32(rdmapb.Code_RESOURCE_EXHAUSTED) {
		t.Fatalf("past the limit: %v", rdmapb.Code(d.Code))
	}
	post.WRID = 2
	p1.post(t, post)
	if d := p1.dones(t, 1)[2]; d.Code != 0 {
		t.Fatalf("after: %v", rdmapb.Code(d.Code))
	}
}
