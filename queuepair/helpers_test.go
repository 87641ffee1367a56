package queuepair

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/coarseclock"
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
	// full makes Post wait as a backend at its in-flight limit does: until
	// the poster's context (wr.Cancel), the request's deadline or the
	// route ends, then refuse.
	full bool
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
	full := r.full
	r.mu.Unlock()
	if full {
		t := time.NewTimer(time.Until(wr.Deadline))
		defer t.Stop()
		select {
		case <-wr.Cancel:
			return fmt.Errorf("fake: waiting for room in flight: %w", context.Canceled)
		case <-t.C:
			return fmt.Errorf("fake: waiting for room in flight: %w", rdmamgr.ErrDeadline)
		case <-r.done:
			return rdmamgr.ErrPeerGone
		}
	}
	r.mu.Lock()
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

func newEnv(t testing.TB, opt qpbind.Options) *env {
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
	e.qp = newQueuePair(7, peerID, e.route, e.local, opt)
	t.Cleanup(func() {
		// Like a closing route: fail what a failed test left pending.
		for _, wr := range e.route.accepted() {
			complete(wr, rdmamgr.ErrClosed)
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

// deadlineNear reports whether dl is timeout after a moment between
// before and after, as the coarse clock gives it: up to its Resolution
// late, and early only by the ticker's scheduling delay (a second allows
// a loaded machine; a clock that stopped or an absent timeout fails).
func deadlineNear(dl, before, after time.Time, timeout time.Duration) bool {
	return !dl.Before(before.Add(timeout-time.Second)) && !dl.After(after.Add(timeout+coarseclock.Resolution))
}
