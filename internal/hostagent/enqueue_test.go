//go:build linux

package hostagent

import (
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
)

// A post the reader registered before the process started going and hands
// to the poster after it went (end and the poster drained the queue
// already) is reported, not left in the queue: end waits for every
// operation, so one left there would hang it (and Close) for good. The
// reader's select saw both the room in the queue and the end, and took
// either.
func TestEnqueueAfterEnd(t *testing.T) {
	for i := 0; i < 200; i++ {
		p := &proc{posts: make(chan *op, 4), dead: make(chan struct{}), wake: make(chan struct{}, 1),
			ops: make(map[uint64]*op)}
		o := &op{p: p, post: agentwire.Post{WRID: 7, Op: backend.OpWrite}, cancelCh: make(chan struct{})}
		p.ops[7] = o
		// end, as far as the reader sees it: the ops are snapshotted (o
		// among them), the queue is drained (empty), dead is closed.
		p.endErr = rdmamgr.ErrPeerGone
		p.opsDone = make(chan struct{})
		close(p.dead)
		if err := p.enqueue(o); !errors.Is(err, rdmamgr.ErrPeerGone) {
			t.Fatalf("enqueue after the end: %v", err)
		}
		select {
		case <-p.opsDone:
		default:
			t.Fatalf("try %d: the post was queued after the end, never reported (%d queued)", i, len(p.posts))
		}
		// No socket here: the done waits for the writer (wout), as on a full one.
		out := append(append([]agentwire.Done(nil), p.wout...), p.out...)
		if len(out) != 1 || out[0].WRID != 7 || out[0].Code != uint32(backend.Code(rdmamgr.ErrPeerGone)) {
			t.Fatalf("dones %+v", out)
		}
	}
}
