//go:build linux

package hostagent

import (
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// raceRoute is a far route whose Post first runs hook (a cancel that
// arrives while the executor posts), then takes the request; Cancel
// completes a posted request with its cause and ignores others (as
// backend.Route's contract says).
type raceRoute struct {
	hook func()
	mu   sync.Mutex
	wrs  map[*backend.WorkRequest]bool
	done chan struct{}
}

func (r *raceRoute) Post(wr *backend.WorkRequest) error {
	if h := r.hook; h != nil {
		r.hook = nil
		h()
	}
	r.mu.Lock()
	r.wrs[wr] = true
	r.mu.Unlock()
	return nil
}

func (r *raceRoute) Cancel(wr *backend.WorkRequest) {
	r.mu.Lock()
	posted := r.wrs[wr]
	delete(r.wrs, wr)
	r.mu.Unlock()
	if posted {
		wr.Done.Complete(wr, wr.CancelCause())
	}
}

func (r *raceRoute) Done() <-chan struct{}     { return r.done }
func (r *raceRoute) Err() error                { return nil }
func (r *raceRoute) Stats() backend.RouteStats { return backend.RouteStats{} }
func (r *raceRoute) Close() error              { return nil }

// A cancel that comes while the executor posts the operation (after it
// looked for a cause, before the route took the request: the route
// ignores a Cancel of a request it does not have) is not lost: the
// operation ends with it. Else it runs on to its end, and a process's end
// (which cancels its operations and waits for them) waits that long.
func TestCancelWhilePosting(t *testing.T) {
	fr := &raceRoute{wrs: map[*backend.WorkRequest]bool{}, done: make(chan struct{})}
	ready := make(chan struct{})
	close(ready)
	a := &Agent{log: slog.New(slog.DiscardHandler), far: map[string]*farSet{"far:1": {ready: ready, peerID: 1,
		routes: []*farRoute{{ready: ready, route: fr, peerID: 1}}}}}
	p := &proc{a: a, posts: make(chan *op, 4), dead: make(chan struct{}), wake: make(chan struct{}, 1),
		ops: make(map[uint64]*op)}
	post := agentwire.Post{WRID: 9, Op: backend.OpFetchAdd, Via: 1, FarAgent: "far:1", FarAgentID: 1, Swap: 1,
		Remote: buffer.Buffer{OwnerID: 1, Region: 1, Length: 8, Access: buffer.AccessAtomic}}
	o, err := p.newOp(&post)
	if err != nil {
		t.Fatal(err)
	}
	fr.hook = func() { p.cancel(9, rdmamgr.ErrClosed) }
	pfr, ok := o.prepareFast()
	if !ok || pfr == nil {
		t.Fatal("not posted")
	}
	o.postOn(pfr)
	p.mu.Lock()
	// No socket here: the done waits for the writer (wout), as on a full one.
	left, out := len(p.ops), append(append([]agentwire.Done(nil), p.wout...), p.out...)
	p.mu.Unlock()
	if left != 0 || len(out) != 1 || out[0].Code != uint32(backend.Code(rdmamgr.ErrClosed)) {
		t.Fatalf("cancelled while posting: %d in flight, dones %+v", left, out)
	}
	if !errors.Is(o.wr.CancelCause(), rdmamgr.ErrClosed) {
		t.Fatal(o.wr.CancelCause())
	}
}
