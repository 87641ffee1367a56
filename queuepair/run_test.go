package queuepair

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// runRoute completes every list it is given at once, in the poster's
// goroutine, through the first request's qpbind.RunCompleter (as shm's
// inline copies do): every third request fails.
type runRoute struct {
	fakeRoute
	runs atomic.Int64
}

func (r *runRoute) PostList(wrs []*backend.WorkRequest) (int, error) {
	errs := make([]error, len(wrs))
	for i := range errs {
		if i%3 == 2 {
			errs[i] = rdmamgr.ErrRevoked
		}
	}
	rc, ok := wrs[0].Done.(qpbind.RunCompleter)
	if !ok {
		panic("a queue pair's request is not a qpbind.RunCompleter")
	}
	r.runs.Add(1)
	rc.CompleteRun(wrs, errs)
	return len(wrs), nil
}

// A chain completed as one run is reported as each would be alone: once,
// through the queue, with its own outcome and the Op.ID it was posted
// with; its local references dropped (the buffer releases) and the queue
// pair's count too (Release returns). Re-posting one the queue still holds
// panics; reaped, each re-posts at once.
func TestCompleteRun(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	defer e.qp.Release()
	r := &runRoute{fakeRoute: *newFakeRoute()}
	qp := newQueuePair(9, peerID, r, e.local, qpbind.Options{})
	cq := NewCompletionQueue(16)
	qp.SetCompletionQueue(cq)
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	other := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	const n = 7
	wrs := make([]*WorkRequest, n)
	ops := make([]Op, n)
	for i := range wrs {
		wrs[i] = new(WorkRequest)
		l := local
		if i >= 4 { // two regions in one run
			l = other
		}
		ops[i] = PutOp(l, remote)
		if i%2 == 1 {
			ops[i] = GetOp(l, remote)
		}
		ops[i].ID = uint64(100 + i)
	}
	out := make([]*WorkRequest, n)
	for round := range 3 {
		qp.PostOps(context.Background(), wrs, ops)
		if got := r.runs.Load(); got != int64(round+1) {
			t.Fatalf("round %d: %d runs, want one per chain", round, got)
		}
		if round == 0 {
			func() {
				defer func() {
					if recover() == nil {
						t.Fatal("re-posting a request the queue holds did not panic")
					}
				}()
				qp.PostPut(context.Background(), wrs[0], local, remote)
			}()
		}
		k := cq.Poll(out)
		if k != n {
			t.Fatalf("round %d: Poll reaped %d, want %d", round, k, n)
		}
		for i, w := range out[:k] {
			if w != wrs[i] || w.ID() != uint64(100+i) {
				t.Fatalf("round %d: report %d is request %d (ID %d), want %d in order", round, i, w.ID()-100, w.ID(), i)
			}
			done, err := w.Poll()
			if !done || (i%3 == 2) != errors.Is(err, rdmamgr.ErrRevoked) || (i%3 != 2 && err != nil) {
				t.Fatalf("round %d: request %d: done %v, err %v", round, i, done, err)
			}
		}
		if k := cq.Poll(out); k != 0 {
			t.Fatalf("round %d: %d more reports, want each once", round, k)
		}
	}
	if !drained(t, e.local, local) || !drained(t, e.local, other) {
		t.Fatal("a local buffer still referenced after every run was reported")
	}
	qp.Release() // returns only once every operation left its count
}

// nullRoute completes every list at once as one run, moving no byte:
// what is left is the queue pair's own cost per operation.
type nullRoute struct {
	fakeRoute
	errs [runChunk]error
}

func (r *nullRoute) PostList(wrs []*backend.WorkRequest) (int, error) {
	all := len(wrs)
	for len(wrs) > 0 {
		n := min(len(wrs), runChunk)
		wrs[0].Done.(qpbind.RunCompleter).CompleteRun(wrs[:n], r.errs[:n])
		wrs = wrs[n:]
	}
	return all, nil
}

// BenchmarkPostOpsRun is the queue pair's share of the post-to-completion
// path of BenchmarkCQ in package shm: chains of 64 posted with PostOps
// into reused work requests and reaped with Poll, on a route that
// completes each chain at once as one run without copying (go test -run
// '^$' -bench PostOpsRun ./queuepair); p10-ns/op is the 10th percentile
// window of 4096 operations.
func BenchmarkPostOpsRun(b *testing.B) {
	const inflight = 64
	e := newEnv(b, qpbind.Options{})
	defer e.qp.Release()
	r := &nullRoute{fakeRoute: *newFakeRoute()}
	qp := newQueuePair(9, peerID, r, e.local, qpbind.Options{})
	defer qp.Release()
	cq := NewCompletionQueue(inflight)
	qp.SetCompletionQueue(cq)
	local, err := e.local.Allocate(8*inflight, buffer.AccessReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	remote, err := e.remote.Allocate(8*inflight, buffer.AccessReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	wrs := make([]*WorkRequest, inflight)
	ops := make([]Op, inflight)
	for i := range wrs {
		wrs[i] = new(WorkRequest)
		l, _ := local.Slice(uint64(8*i), 8)
		rm, _ := remote.Slice(uint64(8*i), 8)
		ops[i] = PutOp(l, rm)
	}
	out := make([]*WorkRequest, inflight)
	ctx := context.Background()
	const window = 64 * inflight
	win := make([]time.Duration, 0, b.N/window+1)
	b.ReportAllocs()
	b.ResetTimer()
	w0 := time.Now()
	for done := 0; done < b.N; done += inflight {
		qp.PostOps(ctx, wrs, ops)
		if k := cq.Poll(out); k != inflight {
			b.Fatalf("reaped %d, want %d", k, inflight)
		}
		if (done/inflight+1)%64 == 0 {
			now := time.Now()
			win = append(win, now.Sub(w0))
			w0 = now
		}
	}
	b.StopTimer()
	if len(win) >= 10 { // the 10th percentile window: robust to a loaded machine's preemptions
		slices.Sort(win)
		b.ReportMetric(float64(win[len(win)/10].Nanoseconds())/window, "p10-ns/op")
	}
}

// reset writes every field of backend.WorkRequest itself (with prepare's
// operands) rather than Reset and then most of them again: a field added
// to backend.WorkRequest must be added there too, or a re-posted request
// carries the last operation's value. This fails until it is. Scratch
// is the one field reset leaves: the backend's, kept across posts.
func TestResetWritesEveryField(t *testing.T) {
	want := []string{"Op", "cause", "Result", "Local", "LocalRegion", "Remote", "Deadline", "Done", "Cancel",
		"Imm", "HasImm", "Waited", "Compare", "Swap", "Via", "Origin", "Scratch"}
	typ := reflect.TypeFor[backend.WorkRequest]()
	var got []string
	for i := range typ.NumField() {
		got = append(got, typ.Field(i).Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("backend.WorkRequest has fields %v, reset (workrequest.go) writes %v: update it", got, want)
	}
	// And a re-posted request starts clean: no Result, no cause, the
	// new operation's handle and deadline.
	e := newEnv(t, qpbind.Options{})
	defer e.qp.Release()
	local := alloc(t, e.local, 8, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 8, buffer.AccessReadWrite)
	w := new(WorkRequest)
	w.wr.Result, w.wr.Via, w.wr.Origin = 7, 3, 9
	w.wr.RequestCancel(errors.New("old"))
	if !e.qp.prepare(w, backend.OpRead, &local, &remote, time.Time{}, nil, &operands{}, nil) {
		t.Fatal("prepare refused the request")
	}
	if w.wr.Result != 0 || w.wr.Via != 0 || w.wr.Origin != 0 || w.wr.CancelCause() != nil || w.wr.Remote != remote || w.wr.Op != backend.OpRead {
		t.Fatalf("re-armed request: result %d, cause %v, op %v", w.wr.Result, w.wr.CancelCause(), w.wr.Op)
	}
	w.finish(nil)
}

// A chain's request from a region the chain resolved already gets its
// bytes from the run's region (prepare's fast path, which does not read
// the Ref it just wrote): exactly the bytes of its reference, which the
// backend copies to or from.
func TestChainLocalIsItsReference(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	r := &listRoute{fakeRoute: *newFakeRoute(), failAt: -1}
	qp := newQueuePair(9, peerID, r, e.local, qpbind.Options{})
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	wrs := make([]*WorkRequest, 4)
	ops := make([]Op, 4)
	for i := range wrs {
		wrs[i] = new(WorkRequest)
		l, _ := local.Slice(uint64(8*i+3), 5)
		rm, _ := remote.Slice(uint64(8*i), 5)
		ops[i] = PutOp(l, rm)
	}
	qp.PostOps(context.Background(), wrs, ops)
	for i, w := range wrs {
		got, want := w.wr.Local, w.ref.Bytes()
		if len(got) != 5 || len(got) != len(want) || cap(got) != cap(want) || &got[0] != &want[0] || w.wr.LocalRegion != w.ref.Region() {
			t.Fatalf("request %d: Local %p len %d cap %d, its reference %p len %d cap %d", i, got, len(got), cap(got), want, len(want), cap(want))
		}
		complete(&w.wr, nil)
	}
	qp.Release()
}
