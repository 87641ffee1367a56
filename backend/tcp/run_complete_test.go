package tcp

import (
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// runRec is a backend.Completer that is also a qpbind.RunCompleter, as a
// queue pair's is: it records each request's outcome and the size of
// every run reported together.
type runRec struct {
	mu   sync.Mutex
	errs map[*backend.WorkRequest][]error
	runs []int
}

var _ qpbind.RunCompleter = (*runRec)(nil)

func (r *runRec) Complete(wr *backend.WorkRequest, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[wr] = append(r.errs[wr], err)
	r.runs = append(r.runs, 1)
}

func (r *runRec) CompleteRun(wrs []*backend.WorkRequest, errs []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, wr := range wrs {
		r.errs[wr] = append(r.errs[wr], errs[i])
	}
	r.runs = append(r.runs, len(wrs))
}

func (r *runRec) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.errs {
		n += len(e)
	}
	return n
}

// TestAnswersCompleteAsRun: answers that arrive together are reported
// together (one CompleteRun of the batch, for a queue pair's requests:
// one lock of their completion queue), each request exactly once, in
// order, and a refused one among them fails alone. Before, each went
// through Complete on its own.
func TestAnswersCompleteAsRun(t *testing.T) {
	f := newFakeServer(t)
	cfg := fastWatchdog()
	cfg.MaxInFlight = 4096
	a, regA := newBackend(t, cfg, backendtest.OwnerA)
	rt := f.connect(t, a)
	fc := f.accept(t)
	_, local := backendtest.Alloc(t, regA, 8, buffer.AccessReadWrite)
	const n, refused = 20, 7
	rec := &runRec{errs: map[*backend.WorkRequest][]error{}}
	wrs := make([]*backend.WorkRequest, n)
	for i := range wrs {
		wrs[i] = &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: fakeRemote(8), Deadline: time.Now().Add(time.Hour), Done: rec}
	}
	if k, err := rt.(backend.ListPoster).PostList(wrs); k != n || err != nil {
		t.Fatalf("PostList = %d, %v", k, err)
	}
	var answers []byte
	for i := range n {
		h := fc.readReq(t)
		fc.readPayload(t, int(h.length))
		resp := respHeader{op: opWrite, wrid: h.wrid}
		if i == refused {
			resp.code = byte(backend.Code(rdmamgr.ErrAccess))
		}
		b := make([]byte, resp.size())
		resp.encode(b)
		answers = append(answers, b...)
	}
	fc.writeRaw(t, answers) // all together: one read takes them
	deadline := time.Now().Add(waitTimeout)
	for rec.count() < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, wr := range wrs {
		errs := rec.errs[wr]
		if len(errs) != 1 {
			t.Fatalf("request %d completed %d times, want once", i, len(errs))
		}
		if (errs[0] != nil) != (i == refused) {
			t.Errorf("request %d: %v (refused: request %d alone)", i, errs[0], refused)
		}
	}
	if len(rec.runs) != 1 || rec.runs[0] != n {
		t.Errorf("reported in runs of %v, want one run of %d", rec.runs, n)
	}
}
