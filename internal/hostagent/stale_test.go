//go:build linux

package hostagent

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// An operation whose far route reports a stale proxy (ibverbs: the far
// agent's rkey died with a cut; the RC route failed with it) is posted
// once more on a fresh route and gets the far agent's own answer: here
// the bytes land. On the code before, the process heard ACCESS_DENIED.
func TestStaleProxyPostsAgain(t *testing.T) {
	a, b, p1, p2 := pairOfAgents(t)
	const n = 64 << 10
	src, srcMem := p1.alloc(t, n, buffer.AccessReadWrite)
	dst, dstMem := p2.alloc(t, n, buffer.AccessReadWrite)
	for i := range srcMem {
		srcMem[i] = byte(i)
	}
	stale := &staleRoute{done: make(chan struct{})}
	ready := make(chan struct{})
	close(ready)
	a.mu.Lock()
	a.far[b.Addr()] = &farSet{ready: ready, peerID: b.mgr.ID(),
		routes: []*farRoute{{ready: ready, route: stale, peerID: b.mgr.ID(), release: func() {}}}}
	a.mu.Unlock()
	p1.post(t, agentwire.Post{WRID: 1, Op: backend.OpWrite, Via: p2.welcome.Slot, FarAgent: b.Addr(), FarAgentID: p2.welcome.AgentID, Local: localOf(src), Remote: dst})
	if d := p1.dones(t, 1)[1]; d.Code != 0 {
		t.Fatalf("put after a stale proxy: %v, want OK (posted again on a fresh route)", rdmapb.Code(d.Code))
	}
	if stale.posts() != 1 {
		t.Fatalf("%d posts on the stale route, want 1", stale.posts())
	}
	if !bytes.Equal(srcMem, dstMem) {
		t.Fatal("bytes differ")
	}
}

// staleRoute fails every post with ErrStaleProxy and ends, as an RC route
// whose peer's rkey died does.
type staleRoute struct {
	backend.Route // nil: only the methods below are used
	mu            sync.Mutex
	n             int
	done          chan struct{}
}

func (s *staleRoute) Post(wr *backend.WorkRequest) error {
	s.mu.Lock()
	s.n++
	if s.n == 1 {
		close(s.done)
	}
	s.mu.Unlock()
	go wr.Done.Complete(wr, fmt.Errorf("test: remote access error: %w", agentapi.ErrStaleProxy))
	return nil
}

func (s *staleRoute) posts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *staleRoute) Done() <-chan struct{}       { return s.done }
func (s *staleRoute) Cancel(*backend.WorkRequest) {}
func (s *staleRoute) Close() error                { return nil }
