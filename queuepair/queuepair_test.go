package queuepair

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

func TestAccessors(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	if e.qp.ID() != 7 || e.qp.PeerID() != peerID || e.qp.Route() != e.route {
		t.Fatalf("id %d peer %x route %v", e.qp.ID(), e.qp.PeerID(), e.qp.Route())
	}
	if e.qp.timeout != DefaultTimeout {
		t.Fatalf("default timeout %v", e.qp.timeout)
	}
}

// A program holds *WorkRequest: it cannot complete an operation in
// flight (only the backend can, through the unexported adapter).
func TestWorkRequestIsNotACompleter(t *testing.T) {
	var w any = new(WorkRequest)
	if _, ok := w.(backend.Completer); ok {
		t.Fatal("*WorkRequest implements backend.Completer")
	}
	var r any = (*QueuePair)(nil).Route
	if _, ok := r.(func() backend.Route); ok {
		t.Fatal("QueuePair.Route hands out the backend route")
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
		do   func(ctx context.Context, l, r buffer.Buffer) *WorkRequest
		op   backend.Op
		err  error
	}{
		{"put", e.qp.Put, backend.OpWrite, nil},
		{"get", e.qp.Get, backend.OpRead, rdmamgr.ErrPeerGone},
		{"put-failing", e.qp.Put, backend.OpWrite, &backend.RemoteError{Code: 2, Op: backend.OpWrite}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			w := tc.do(context.Background(), local, remote)
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
			if !deadlineNear(wr.Deadline, before, after, timeout) {
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
				w = e.qp.Put(context.Background(), local, remote)
			} else {
				w = e.qp.Get(context.Background(), local, remote)
			}
			wr := e.route.next(t)

			released := make(chan error, 1)
			go func() { released <- e.local.Release(context.Background(), local) }()

			// Wait until Release has begun: the region no longer resolves.
			eventually(t, "release started", func() bool {
				ref, err := e.local.AcquireLocal(local)
				if errors.Is(err, rdmamgr.ErrReleased) {
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
			if err := e.qp.Put(context.Background(), local, remote).Err(); !errors.Is(err, rdmamgr.ErrReleased) {
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
	w := e.qp.Put(context.Background(), local, remote)
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
		op            func(ctx context.Context, l, r buffer.Buffer) *WorkRequest
		local, remote buffer.Buffer
		want          []error
	}{
		{"wrong peer (foreign remote)", e.qp.Put, local, notOurs, []error{rdmamgr.ErrWrongPeer}},
		{"wrong peer (our own buffer)", e.qp.Get, local, localAsRemote, []error{rdmamgr.ErrWrongPeer}},
		{"wrong peer (zero handle)", e.qp.Get, local, buffer.Buffer{}, []error{rdmamgr.ErrWrongPeer}},
		{"length mismatch", e.qp.Put, local, half, []error{rdmamgr.ErrLengthMismatch}},
		{"zero length", e.qp.Put, emptyL, emptyR, []error{rdmamgr.ErrInvalid}},
		{"put to read-only", e.qp.Put, local, remoteRO, []error{rdmamgr.ErrAccess}},
		{"get from write-only", e.qp.Get, local, remoteWO, []error{rdmamgr.ErrAccess}},
		{"put to no-access", e.qp.Put, local, remoteNone, []error{rdmamgr.ErrAccess}},
		{"get from no-access", e.qp.Get, local, remoteNone, []error{rdmamgr.ErrAccess}},
		{"remote overflow", e.qp.Get, local, overflow, []error{rdmamgr.ErrOutOfRange}},
		{"local not owned", e.qp.Put, notOurs, remote, []error{rdmamgr.ErrNotLocal, rdmamgr.ErrInvalid}},
		{"local bad key", e.qp.Get, badKey, remote, []error{rdmamgr.ErrBadKey}},
		{"local released", e.qp.Put, released, remote, []error{rdmamgr.ErrReleased}},
		{"local out of range", e.qp.Put, outOfRangeLocal, remote, []error{rdmamgr.ErrOutOfRange}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.op(context.Background(), tc.local, tc.remote)
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
	if w := e.qp.Get(context.Background(), local, remoteRO); func() bool { d, _ := w.Poll(); return d }() {
		t.Fatalf("get from read-only refused: %v", w.Err())
	}
	complete(e.route.next(t), nil)
	if w := e.qp.Put(context.Background(), local, remoteWO); func() bool { d, _ := w.Poll(); return d }() {
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
