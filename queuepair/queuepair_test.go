package queuepair

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// fakeRoute records posted work requests and lets the test complete them.
type fakeRoute struct {
	posted  chan *backend.WorkRequest // every accepted post, in order
	postErr error                     // when set, Post refuses with it

	mu    sync.Mutex
	all   []*backend.WorkRequest
	done  chan struct{}
	once  sync.Once
	nPost int // calls of Post, accepted or not
	// holdCancel makes Cancel only record the request; otherwise Cancel
	// completes it with its cause at once, as a backend would.
	holdCancel bool
	cancels    chan *backend.WorkRequest // every Cancel call, in order
}

func newFakeRoute() *fakeRoute {
	return &fakeRoute{posted: make(chan *backend.WorkRequest, 1024), done: make(chan struct{}),
		cancels: make(chan *backend.WorkRequest, 1024)}
}

func (r *fakeRoute) Cancel(wr *backend.WorkRequest) {
	r.mu.Lock()
	hold := r.holdCancel
	r.mu.Unlock()
	r.cancels <- wr
	if !hold {
		wr.Done.Complete(wr, fmt.Errorf("fake: %w", wr.CancelCause()))
	}
}

func (r *fakeRoute) Post(wr *backend.WorkRequest) error {
	r.mu.Lock()
	r.nPost++
	err := r.postErr
	if err == nil {
		r.all = append(r.all, wr)
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	r.posted <- wr
	return nil
}

func (r *fakeRoute) Done() <-chan struct{}     { return r.done }
func (r *fakeRoute) Err() error                { return nil }
func (r *fakeRoute) Stats() backend.RouteStats { return backend.RouteStats{} }
func (r *fakeRoute) Close() error              { r.once.Do(func() { close(r.done) }); return nil }
func (r *fakeRoute) setPostErr(err error)      { r.mu.Lock(); r.postErr = err; r.mu.Unlock() }
func (r *fakeRoute) calls() int                { r.mu.Lock(); defer r.mu.Unlock(); return r.nPost }
func (r *fakeRoute) accepted() []*backend.WorkRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*backend.WorkRequest(nil), r.all...)
}

// next returns the next posted request or fails the test.
func (r *fakeRoute) next(t *testing.T) *backend.WorkRequest {
	t.Helper()
	select {
	case wr := <-r.posted:
		return wr
	case <-time.After(10 * time.Second):
		t.Fatal("no work request posted")
		return nil
	}
}

func complete(wr *backend.WorkRequest, err error) { wr.Done.Complete(wr, err) }

// eventually polls cond until it holds, failing the test if it never does.
// It bounds a wait; it does not measure anything.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(limit) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

const (
	localID = 0x1111
	peerID  = 0x2222
)

type env struct {
	local  *memreg.Registry // this manager's registry (the Resolver)
	remote *memreg.Registry // stands for the peer's registry: makes real handles
	route  *fakeRoute
	qp     *QueuePair
	rels   *int // OnRelease calls
	relMu  *sync.Mutex
}

func newEnv(t *testing.T, opt qpbind.Options) *env {
	t.Helper()
	e := &env{
		local:  memreg.NewRegistry(localID, buffer.Limits{}),
		remote: memreg.NewRegistry(peerID, buffer.Limits{}),
		route:  newFakeRoute(),
		rels:   new(int),
		relMu:  new(sync.Mutex),
	}
	user := opt.OnRelease
	opt.OnRelease = func() {
		e.relMu.Lock()
		*e.rels++
		e.relMu.Unlock()
		if user != nil {
			user()
		}
	}
	e.qp = New(7, peerID, e.route, e.local, opt)
	t.Cleanup(func() {
		// Like a closing route: fail what a failed test left pending.
		for _, wr := range e.route.accepted() {
			complete(wr, backend.ErrClosed)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.local.Close(ctx); err != nil {
			t.Errorf("close local registry: %v", err)
		}
		_ = e.remote.Close(ctx)
	})
	return e
}

func (e *env) releases() int { e.relMu.Lock(); defer e.relMu.Unlock(); return *e.rels }

func alloc(t *testing.T, g *memreg.Registry, n uint64, a buffer.Access) buffer.Buffer {
	t.Helper()
	b, err := g.Allocate(n, a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// drained reports whether the region of b holds no references: a release
// with an already-cancelled context succeeds only then.
func drained(t *testing.T, g *memreg.Registry, b buffer.Buffer) bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := g.Release(ctx, b)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("release %v: %v", b, err)
	}
	return err == nil
}

func TestAccessors(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	if e.qp.ID() != 7 || e.qp.PeerID() != peerID || e.qp.Route() != e.route {
		t.Fatalf("id %d peer %x route %v", e.qp.ID(), e.qp.PeerID(), e.qp.Route())
	}
	if e.qp.timeout != DefaultTimeout {
		t.Fatalf("default timeout %v", e.qp.timeout)
	}
}

func TestPutGetAsync(t *testing.T) {
	const timeout = time.Hour
	e := newEnv(t, qpbind.Options{Timeout: timeout})
	local := alloc(t, e.local, 4096, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 4096, buffer.AccessReadWrite)
	mem, err := e.local.Bytes(local)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		do   func(l, r buffer.Buffer) *WorkRequest
		op   backend.Op
		err  error
	}{
		{"put", e.qp.Put, backend.OpWrite, nil},
		{"get", e.qp.Get, backend.OpRead, backend.ErrPeerGone},
		{"put-failing", e.qp.Put, backend.OpWrite, &backend.RemoteError{Code: 2, Op: backend.OpWrite}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			w := tc.do(local, remote)
			after := time.Now()
			wr := e.route.next(t)

			// Returned at once, still pending.
			if done, err := w.Poll(); done || err != nil {
				t.Fatalf("poll before completion: %v %v", done, err)
			}
			if w.Err() != nil {
				t.Fatalf("err before completion: %v", w.Err())
			}
			select {
			case <-w.Done():
				t.Fatal("done before completion")
			default:
			}
			// The posted request describes the operation.
			if wr.Op != tc.op || wr.Remote != remote || len(wr.Local) != len(mem) || &wr.Local[0] != &mem[0] {
				t.Fatalf("posted %v remote %v local %d bytes", wr.Op, wr.Remote, len(wr.Local))
			}
			if wr.Deadline.Before(before.Add(timeout)) || wr.Deadline.After(after.Add(timeout)) {
				t.Fatalf("deadline %v not now+%v", wr.Deadline, timeout)
			}
			if wr.Done == nil {
				t.Fatal("no completer")
			}

			complete(wr, tc.err)
			<-w.Done()
			done, perr := w.Poll()
			if !done || !errors.Is(perr, tc.err) || (tc.err == nil) != (perr == nil) {
				t.Fatalf("poll after completion: %v %v, want %v", done, perr, tc.err)
			}
			if err := w.Wait(context.Background()); !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("wait: %v, want %v", err, tc.err)
			}
			if !errors.Is(w.Err(), tc.err) || (tc.err == nil) != (w.Err() == nil) {
				t.Fatalf("err: %v", w.Err())
			}
			// A second completion is ignored.
			complete(wr, errors.New("late"))
			if err := w.Err(); !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("err changed by a second completion: %v", err)
			}
		})
	}
	// Every reference was dropped exactly once.
	if !drained(t, e.local, local) {
		t.Fatal("local region still referenced after all completions")
	}
}

func TestWaitContext(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 100, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 100, buffer.AccessReadWrite)

	// A cancelled ctx cancels the operation; Wait returns its outcome.
	w := e.qp.Get(local, remote)
	wr := e.route.next(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := w.Wait(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with cancelled ctx: %v", err)
	}
	if got := <-e.route.cancels; got != wr {
		t.Fatal("Cancel not called with the posted request")
	}
	if done, perr := w.Poll(); !done || perr != err {
		t.Fatalf("poll after wait: %v %v, want %v", done, perr, err)
	}

	// A passed deadline: the error matches both deadline sentinels.
	w = e.qp.Get(local, remote)
	e.route.next(t)
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	err = w.Wait(dctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, backend.ErrDeadline) {
		t.Fatalf("wait with expired ctx: %v", err)
	}
	<-e.route.cancels

	// Wait does not return before the backend completed the request (it
	// may still be touching the memory), and then reports what it said.
	e.route.holdCancel = true
	local2 := alloc(t, e.local, 100, buffer.AccessReadWrite)
	w = e.qp.Get(local2, remote)
	wr = e.route.next(t)
	res := make(chan error, 1)
	go func() { res <- w.Wait(dctx) }()
	if got := <-e.route.cancels; got != wr {
		t.Fatal("Cancel not called with the posted request")
	}
	select {
	case err := <-res:
		t.Fatalf("wait returned %v before the backend completed the request", err)
	case <-time.After(50 * time.Millisecond):
	}
	if drained(t, e.local, local2) { // starts the release: no new work on local2
		t.Fatal("local region released while the backend holds it")
	}
	complete(wr, nil) // it finished before the cancel took effect
	if err := <-res; err != nil {
		t.Fatalf("wait after completion: %v", err)
	}
	if done, err := w.Poll(); !done || err != nil {
		t.Fatalf("poll: %v %v", done, err)
	}

	// Cancel ends it the same way.
	e.route.holdCancel = false
	w = e.qp.Put(local, remote)
	e.route.next(t)
	if err := w.Cancel(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: %v", err)
	}
	<-e.route.cancels
	if err := w.Cancel(); !errors.Is(err, context.Canceled) {
		t.Fatalf("second cancel: %v", err)
	}
	select {
	case <-e.route.cancels:
		t.Fatal("a completed request was cancelled again")
	default:
	}
}

// Submit's ctx cancels its operations when it ends, with nobody waiting.
func TestSubmitContextCancels(t *testing.T) {
	e := newEnv(t, qpbind.Options{Timeout: time.Hour})
	local := alloc(t, e.local, 200, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 200, buffer.AccessReadWrite)
	l1, _ := local.Slice(0, 100)
	l2, _ := local.Slice(100, 100)
	r1, _ := remote.Slice(0, 100)
	r2, _ := remote.Slice(100, 100)
	ctx, cancel := context.WithCancel(context.Background())
	b := e.qp.Submit(ctx, GetOp(l1, r1), PutOp(l2, r2))
	first, second := e.route.next(t), e.route.next(t)
	complete(first, nil)
	cancel()
	if got := <-e.route.cancels; got != second {
		t.Fatal("the pending request was not cancelled")
	}
	eventually(t, "batch done", func() bool { done, _ := b.Poll(); return done })
	if b.Requests()[0].Err() != nil || !errors.Is(b.Requests()[1].Err(), context.Canceled) {
		t.Fatalf("outcomes: %v, %v", b.Requests()[0].Err(), b.Requests()[1].Err())
	}
	select {
	case <-e.route.cancels:
		t.Fatal("a completed request was cancelled")
	default:
	}
	// A ctx that ended before Submit: nothing is posted.
	b = e.qp.Submit(ctx, GetOp(l1, r1))
	if err := b.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("submit with ended ctx: %v", err)
	}
	if !drained(t, e.local, local) {
		t.Fatal("local region still referenced")
	}
}

// The local region stays referenced until the request completes:
// Registry.Release of the local buffer blocks until then.
func TestLocalReferenceHeldUntilCompletion(t *testing.T) {
	for _, op := range []string{"put", "get"} {
		t.Run(op, func(t *testing.T) {
			e := newEnv(t, qpbind.Options{})
			local := alloc(t, e.local, 8192, buffer.AccessReadWrite)
			remote := alloc(t, e.remote, 8192, buffer.AccessReadWrite)
			var w *WorkRequest
			if op == "put" {
				w = e.qp.Put(local, remote)
			} else {
				w = e.qp.Get(local, remote)
			}
			wr := e.route.next(t)

			released := make(chan error, 1)
			go func() { released <- e.local.Release(context.Background(), local) }()

			// Wait until Release has begun: the region no longer resolves.
			eventually(t, "release started", func() bool {
				ref, err := e.local.AcquireLocal(local)
				if errors.Is(err, buffer.ErrReleased) {
					return true
				}
				if err != nil {
					t.Fatal(err)
				}
				ref.Release()
				select {
				case err := <-released:
					t.Fatalf("release returned before completion: %v", err)
				default:
				}
				return false
			})
			// Release started and cannot finish while the request holds the
			// region; the request is still pending.
			select {
			case err := <-released:
				t.Fatalf("release returned before completion: %v", err)
			default:
			}
			if done, _ := w.Poll(); done {
				t.Fatal("completed before the route completed it")
			}
			// New operations on the buffer are refused.
			if err := e.qp.Put(local, remote).Err(); !errors.Is(err, buffer.ErrReleased) {
				t.Fatalf("put on a releasing buffer: %v", err)
			}

			complete(wr, nil)
			if err := <-released; err != nil {
				t.Fatalf("release: %v", err)
			}
			if err := w.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			if st := e.local.Stats(); st.Regions != 0 || st.Bytes != 0 {
				t.Fatalf("registry after release: %+v", st)
			}
		})
	}
}

// Release with a context that ends first reports the context error while the
// request is pending; the region is freed once the request completes.
func TestReleaseContextWhilePending(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 10, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 10, buffer.AccessReadWrite)
	w := e.qp.Put(local, remote)
	wr := e.route.next(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.local.Release(ctx, local); !errors.Is(err, context.Canceled) {
		t.Fatalf("release while pending: %v", err)
	}
	complete(wr, nil)
	<-w.Done()
	// The region is freed by the registry once drained.
	eventually(t, "region freed", func() bool { return e.local.Stats().Bytes == 0 })
}

func TestErrorsBeforePosting(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 4096, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 4096, buffer.AccessReadWrite)
	remoteRO := alloc(t, e.remote, 4096, buffer.AccessRead)
	remoteWO := alloc(t, e.remote, 4096, buffer.AccessWrite)
	remoteNone := alloc(t, e.remote, 4096, 0)
	foreign := memreg.NewRegistry(0x3333, buffer.Limits{})
	notOurs := alloc(t, foreign, 4096, buffer.AccessReadWrite)
	t.Cleanup(func() { _ = foreign.Close(context.Background()) })
	released := alloc(t, e.local, 4096, buffer.AccessReadWrite)
	if err := e.local.Release(context.Background(), released); err != nil {
		t.Fatal(err)
	}

	half, _ := remote.Slice(0, 2048)
	emptyL, _ := local.Slice(10, 0)
	emptyR, _ := remote.Slice(10, 0)
	badKey := local
	badKey.Key[3] ^= 0x40
	overflow := remote
	overflow.Offset = math.MaxUint64 - 10
	outOfRangeLocal := local
	outOfRangeLocal.Offset = 1 // 4096 bytes from offset 1: past the region
	localAsRemote := local     // owned by us, not by the peer

	cases := []struct {
		name          string
		op            func(l, r buffer.Buffer) *WorkRequest
		local, remote buffer.Buffer
		want          []error
	}{
		{"wrong peer (foreign remote)", e.qp.Put, local, notOurs, []error{ErrWrongPeer}},
		{"wrong peer (our own buffer)", e.qp.Get, local, localAsRemote, []error{ErrWrongPeer}},
		{"wrong peer (zero handle)", e.qp.Get, local, buffer.Buffer{}, []error{ErrWrongPeer}},
		{"length mismatch", e.qp.Put, local, half, []error{ErrLengthMismatch}},
		{"zero length", e.qp.Put, emptyL, emptyR, []error{buffer.ErrInvalid}},
		{"put to read-only", e.qp.Put, local, remoteRO, []error{buffer.ErrAccess}},
		{"get from write-only", e.qp.Get, local, remoteWO, []error{buffer.ErrAccess}},
		{"put to no-access", e.qp.Put, local, remoteNone, []error{buffer.ErrAccess}},
		{"get from no-access", e.qp.Get, local, remoteNone, []error{buffer.ErrAccess}},
		{"remote overflow", e.qp.Get, local, overflow, []error{buffer.ErrOutOfRange}},
		{"local not owned", e.qp.Put, notOurs, remote, []error{ErrNotLocal, buffer.ErrInvalid}},
		{"local bad key", e.qp.Get, badKey, remote, []error{buffer.ErrBadKey}},
		{"local released", e.qp.Put, released, remote, []error{buffer.ErrReleased}},
		{"local out of range", e.qp.Put, outOfRangeLocal, remote, []error{buffer.ErrOutOfRange}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.op(tc.local, tc.remote)
			done, err := w.Poll()
			if !done {
				t.Fatal("not completed at once")
			}
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Fatalf("error %v does not wrap %v", err, want)
				}
			}
			if err := w.Wait(context.Background()); !errors.Is(err, tc.want[0]) {
				t.Fatalf("wait: %v", err)
			}
		})
	}
	// read-only remote allows Get, write-only allows Put.
	if w := e.qp.Get(local, remoteRO); func() bool { d, _ := w.Poll(); return d }() {
		t.Fatalf("get from read-only refused: %v", w.Err())
	}
	complete(e.route.next(t), nil)
	if w := e.qp.Put(local, remoteWO); func() bool { d, _ := w.Poll(); return d }() {
		t.Fatalf("put to write-only refused: %v", w.Err())
	}
	complete(e.route.next(t), nil)
	if n := e.route.calls(); n != 2 {
		t.Fatalf("route saw %d posts, want only the 2 valid ones", n)
	}
	if !drained(t, e.local, local) {
		t.Fatal("a refused request kept a reference on the local region")
	}
}

func TestPostErrorPropagates(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	for _, perr := range []error{backend.ErrPeerGone, backend.ErrClosed, fmt.Errorf("in flight: %w", backend.ErrLimit)} {
		e.route.setPostErr(perr)
		w := e.qp.Put(local, remote)
		done, err := w.Poll()
		if !done || !errors.Is(err, perr) {
			t.Fatalf("post error %v: got %v %v", perr, done, err)
		}
	}
	if n := len(e.route.accepted()); n != 0 {
		t.Fatalf("%d requests accepted", n)
	}
	if !drained(t, e.local, local) {
		t.Fatal("a request refused by the route kept a reference on the local region")
	}
}

func TestRelease(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); e.qp.Release() }()
	}
	wg.Wait()
	e.qp.Release()
	if n := e.releases(); n != 1 {
		t.Fatalf("OnRelease called %d times", n)
	}
	for _, w := range []*WorkRequest{e.qp.Put(local, remote), e.qp.Get(local, remote)} {
		if done, err := w.Poll(); !done || !errors.Is(err, ErrReleased) {
			t.Fatalf("op after release: %v %v", done, err)
		}
	}
	if e.route.calls() != 0 {
		t.Fatal("released queue pair posted")
	}
	b := e.qp.Submit(context.Background(), PutOp(local, remote), GetOp(local, remote))
	if done, err := b.Poll(); !done || !errors.Is(err, ErrReleased) {
		t.Fatalf("batch after release: %v %v", done, err)
	}
}

// Release lets operations already posted complete normally, and gives the
// queue pair back (OnRelease) only once they have.
func TestReleaseWaitsForPosted(t *testing.T) {
	onRel := make(chan struct{})
	e := newEnv(t, qpbind.Options{OnRelease: func() { close(onRel) }})
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	w1 := e.qp.Put(local, remote)
	w2 := e.qp.Get(local, remote)
	wr1, wr2 := e.route.next(t), e.route.next(t)

	relDone := make(chan struct{})
	go func() { e.qp.Release(); close(relDone) }()
	// New operations are refused as soon as Release started.
	eventually(t, "release started", func() bool {
		if err := e.qp.Put(local, remote).Err(); errors.Is(err, ErrReleased) {
			return true
		}
		complete(e.route.next(t), nil) // posted before Release took effect
		return false
	})
	select {
	case <-onRel:
		t.Fatal("OnRelease before posted operations completed")
	case <-relDone:
		t.Fatal("Release returned before posted operations completed")
	default:
	}
	complete(wr1, nil)
	select {
	case <-onRel:
		t.Fatal("OnRelease with an operation still posted")
	default:
	}
	complete(wr2, backend.ErrDeadline)
	<-relDone
	<-onRel
	if err := w1.Err(); err != nil {
		t.Fatalf("posted put: %v", err)
	}
	if err := w2.Err(); !errors.Is(err, backend.ErrDeadline) {
		t.Fatalf("posted get: %v", err)
	}
	if n := e.releases(); n != 1 {
		t.Fatalf("OnRelease called %d times", n)
	}
}

func TestSubmitSharesDeadline(t *testing.T) {
	e := newEnv(t, qpbind.Options{Timeout: time.Hour})
	local := alloc(t, e.local, 3000, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 3000, buffer.AccessReadWrite)
	var ops []Op
	for i := range uint64(3) {
		l, _ := local.Slice(i*1000, 1000)
		r, _ := remote.Slice(2000-i*1000, 1000)
		if i%2 == 0 {
			ops = append(ops, PutOp(l, r))
		} else {
			ops = append(ops, GetOp(l, r))
		}
	}
	dl := time.Now().Add(17 * time.Minute).Round(0)
	ctx, cancel := context.WithDeadline(context.Background(), dl)
	defer cancel()
	b := e.qp.Submit(ctx, ops...)
	if len(b.Requests()) != 3 {
		t.Fatalf("%d requests", len(b.Requests()))
	}
	posted := []*backend.WorkRequest{e.route.next(t), e.route.next(t), e.route.next(t)}
	for i, wr := range posted {
		if !wr.Deadline.Equal(dl) {
			t.Fatalf("request %d deadline %v, want the ctx deadline %v", i, wr.Deadline, dl)
		}
		if wr.Op != ops[i].Op || wr.Remote != ops[i].Remote || uint64(len(wr.Local)) != ops[i].Local.Length {
			t.Fatalf("request %d: %v %v", i, wr.Op, wr.Remote)
		}
	}
	if done, err := b.Poll(); done || err != nil {
		t.Fatalf("batch poll before completion: %v %v", done, err)
	}
	complete(posted[0], nil)
	complete(posted[2], backend.ErrPeerGone)
	if done, _ := b.Poll(); done {
		t.Fatal("batch done with one request pending")
	}
	// Wait with an ended ctx cancels what is pending and reports it.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := b.Wait(cctx); !errors.Is(err, context.Canceled) || !errors.Is(err, backend.ErrPeerGone) {
		t.Fatalf("batch wait with cancelled ctx: %v", err)
	}
	complete(posted[1], buffer.ErrBadKey) // too late: already reported
	done, perr := b.Poll()
	if !done || !errors.Is(perr, backend.ErrPeerGone) || !errors.Is(perr, context.Canceled) || errors.Is(perr, buffer.ErrBadKey) {
		t.Fatalf("batch poll: %v %v", done, perr)
	}
	werr := b.Wait(context.Background())
	if errs := werr.(interface{ Unwrap() []error }).Unwrap(); len(errs) != 2 {
		t.Fatalf("joined %d errors: %v", len(errs), werr)
	}
	if b.Requests()[0].Err() != nil || !errors.Is(b.Requests()[1].Err(), context.Canceled) {
		t.Fatal("per-request errors")
	}
	if !drained(t, e.local, local) {
		t.Fatal("local region still referenced")
	}
}

func TestSubmitDefaultDeadlineAndBadOp(t *testing.T) {
	const timeout = 3 * time.Hour
	e := newEnv(t, qpbind.Options{Timeout: timeout})
	local := alloc(t, e.local, 100, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 100, buffer.AccessRead)
	before := time.Now()
	b := e.qp.Submit(context.Background(), GetOp(local, remote), PutOp(local, remote), GetOp(local, remote))
	after := time.Now()
	wr1, wr3 := e.route.next(t), e.route.next(t)
	if !wr1.Deadline.Equal(wr3.Deadline) {
		t.Fatalf("deadlines differ: %v %v", wr1.Deadline, wr3.Deadline)
	}
	if wr1.Deadline.Before(before.Add(timeout)) || wr1.Deadline.After(after.Add(timeout)) {
		t.Fatalf("deadline %v not now+%v", wr1.Deadline, timeout)
	}
	// The refused Put completed at once; the batch is not done.
	if d, err := b.Requests()[1].Poll(); !d || !errors.Is(err, buffer.ErrAccess) {
		t.Fatalf("put to read-only in batch: %v %v", d, err)
	}
	if d, _ := b.Poll(); d {
		t.Fatal("batch done early")
	}
	complete(wr1, nil)
	complete(wr3, nil)
	if err := b.Wait(context.Background()); !errors.Is(err, buffer.ErrAccess) {
		t.Fatalf("batch: %v", err)
	}
	// An empty batch is done at once.
	if d, err := e.qp.Submit(context.Background()).Poll(); !d || err != nil {
		t.Fatalf("empty batch: %v %v", d, err)
	}
}

// Many goroutines post while another completes: run with -race.
func TestConcurrentPosts(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 1<<16, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 1<<16, buffer.AccessReadWrite)
	const goroutines, per = 8, 50
	stop := make(chan struct{})
	completerDone := make(chan struct{})
	go func() {
		defer close(completerDone)
		n := 0
		for n < goroutines*per {
			select {
			case wr := <-e.route.posted:
				var err error
				if n%7 == 0 {
					err = backend.ErrDeadline
				}
				complete(wr, err)
				n++
			case <-stop:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				off := uint64((g*per + i) % 64 * 1024)
				l, _ := local.Slice(off, 1024)
				r, _ := remote.Slice(off, 1024)
				var w *WorkRequest
				if i%2 == 0 {
					w = e.qp.Put(l, r)
				} else {
					w = e.qp.Get(l, r)
				}
				if err := w.Wait(context.Background()); err != nil && !errors.Is(err, backend.ErrDeadline) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-completerDone
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := len(e.route.accepted()); n != goroutines*per {
		t.Fatalf("%d posted", n)
	}
	if !drained(t, e.local, local) {
		t.Fatal("local region still referenced")
	}
}

// A caller-owned WorkRequest is reused across operations; each use is
// counted until it completes, so Release still waits for the pending one.
func TestReusedWorkRequest(t *testing.T) {
	onRel := make(chan struct{})
	e := newEnv(t, qpbind.Options{OnRelease: func() { close(onRel) }})
	local := alloc(t, e.local, 512, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 512, buffer.AccessReadWrite)
	var w WorkRequest
	if done, err := w.Poll(); done || err != nil {
		t.Fatalf("zero WorkRequest: %v %v", done, err)
	}
	for i := range 10 {
		if i%2 == 0 {
			e.qp.PostPut(&w, local, remote)
		} else {
			e.qp.PostGet(&w, local, remote)
		}
		wr := e.route.next(t)
		if wr.Op != [2]backend.Op{backend.OpWrite, backend.OpRead}[i%2] || wr.LocalRegion == nil {
			t.Fatalf("use %d: op %v region %v", i, wr.Op, wr.LocalRegion)
		}
		var want error
		if i == 3 {
			want = backend.ErrPeerGone
		}
		complete(wr, want)
		if err := w.Wait(context.Background()); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Fatalf("use %d: %v", i, err)
		}
	}
	// Re-arming a pending request is a caller bug.
	e.qp.PostPut(&w, local, remote)
	pending := e.route.next(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("re-arming a pending WorkRequest did not panic")
			}
		}()
		e.qp.PostGet(&w, local, remote)
	}()
	// A refused use does not count: Release waits only for the pending one.
	var refused WorkRequest
	e.qp.PostPut(&refused, local, local) // wrong peer
	if done, err := refused.Poll(); !done || !errors.Is(err, ErrWrongPeer) {
		t.Fatalf("refused: %v %v", done, err)
	}
	relDone := make(chan struct{})
	go func() { e.qp.Release(); close(relDone) }()
	eventually(t, "release started", func() bool {
		var probe WorkRequest // new uses are refused once it did
		e.qp.PostGet(&probe, local, remote)
		if errors.Is(probe.Err(), ErrReleased) {
			return true
		}
		complete(e.route.next(t), nil)
		return false
	})
	select {
	case <-onRel:
		t.Fatal("OnRelease with a reused request still pending")
	default:
	}
	complete(pending, nil)
	<-relDone
	<-onRel
	if err := w.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	// After Release the reusable request is refused, and can be reused.
	e.qp.PostPut(&w, local, remote)
	if done, err := w.Poll(); !done || !errors.Is(err, ErrReleased) {
		t.Fatalf("after release: %v %v", done, err)
	}
	if !drained(t, e.local, local) {
		t.Fatal("local region still referenced")
	}
}

// syncRoute completes every request inside Post, allocating nothing.
type syncRoute struct{ fakeRoute }

func (r *syncRoute) Post(wr *backend.WorkRequest) error {
	wr.Done.Complete(wr, nil)
	return nil
}

// The queue pair's own bookkeeping (including the count Release waits on)
// allocates nothing per reused operation.
func TestReusedWorkRequestAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation count is not meaningful under -race")
	}
	e := newEnv(t, qpbind.Options{})
	qp := New(1, peerID, &syncRoute{}, e.local, qpbind.Options{})
	local := alloc(t, e.local, 4096, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 4096, buffer.AccessReadWrite)
	var w WorkRequest
	ctx := context.Background()
	run := func() {
		qp.PostPut(&w, local, remote)
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		qp.PostGet(&w, local, remote)
		if err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if a := testing.AllocsPerRun(200, run); a != 0 {
		t.Fatalf("%.2f allocations per put+get, want 0", a)
	}
	qp.Release()
}
