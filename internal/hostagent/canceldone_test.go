//go:build linux

package hostagent

import (
	"context"
	"log/slog"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// lateRoute is a far route whose Cancel only asks (as TCP's does for a
// response being read: the reader ends the operation once it is out of
// the memory); the test completes the request itself.
type lateRoute struct {
	raceRoute
	cancels int
}

func (r *lateRoute) Cancel(wr *backend.WorkRequest) {
	r.mu.Lock()
	r.cancels++
	r.mu.Unlock()
}

// A process's cancel of an operation on a far route is answered (its
// done) only once the far route reported the operation: until then the
// route may still be reading into the agent's proxy of the process's
// pages, and a done sent earlier would let the process reuse memory the
// agent still writes (a stale byte). TestCancelStressThroughAgents in
// backend/agent hunts the same end to end; this pins the order.
func TestCancelDoneWaitsForFarRoute(t *testing.T) {
	fr := &lateRoute{raceRoute: raceRoute{wrs: map[*backend.WorkRequest]bool{}, done: make(chan struct{})}}
	ready := make(chan struct{})
	close(ready)
	a := &Agent{log: slog.New(slog.DiscardHandler), far: map[string]*farSet{"far:1": {ready: ready, peerID: 1,
		routes: []*farRoute{{ready: ready, route: fr, peerID: 1}}}}}
	p := &proc{a: a, posts: make(chan *op, 4), dead: make(chan struct{}), wake: make(chan struct{}, 1),
		ops: make(map[uint64]*op)}
	post := agentwire.Post{WRID: 7, Op: backend.OpFetchAdd, Via: 1, FarAgent: "far:1", FarAgentID: 1, Swap: 1,
		Remote: buffer.Buffer{OwnerID: 1, Region: 1, Length: 8, Access: buffer.AccessAtomic}}
	o, err := p.newOp(&post)
	if err != nil {
		t.Fatal(err)
	}
	pfr, ok := o.prepareFast()
	if !ok || pfr == nil {
		t.Fatal("not posted")
	}
	o.postOn(pfr)
	dones := func() (int, []agentwire.Done) {
		p.mu.Lock()
		defer p.mu.Unlock()
		// No socket here: a done waits for the writer (wout), as on a full one.
		return len(p.ops), append(append([]agentwire.Done(nil), p.wout...), p.out...)
	}

	p.cancel(7, context.Canceled)
	if fr.cancels != 1 {
		t.Fatalf("the far route saw %d cancels, want 1", fr.cancels)
	}
	if left, out := dones(); left != 1 || len(out) != 0 {
		t.Fatalf("cancelled, the far route not done with it yet: %d in flight, dones %+v (want 1, none)", left, out)
	}

	o.wr.Done.Complete(&o.wr, o.wr.CancelCause()) // the far route is out of the memory
	if left, out := dones(); left != 0 || len(out) != 1 || out[0].WRID != 7 || out[0].Code != uint32(backend.Code(context.Canceled)) {
		t.Fatalf("the far route reported it: %d in flight, dones %+v (want 0, one CANCELLED)", left, out)
	}
}
