// Package qpbind holds what the manager binds a queue pair with when it
// makes one (internal/wiring.NewQueuePair): the local registry it resolves buffers in,
// the operation timeout, the release callback and the metrics observer.
// These types are internal so that only the manager (and the module's own
// tests) can make queue pairs: a program gets one from
// actor.Client.RequestQueuePair, already bound to a route.
package qpbind

import (
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Resolver resolves a local handle to its memory and holds a reference on
// its region until the Ref's Release; *memreg.Registry implements it.
type Resolver interface {
	AcquireLocal(b buffer.Buffer) (memreg.Ref, error)
}

// Observer sees the outcome of every operation of the queue pairs it is
// given to (Options.Observer), for metrics. Observe runs on the goroutine
// that completes the operation, before the caller learns the outcome: it
// must be quick and must not block.
type Observer interface {
	Observe(kind backend.Kind, op backend.Op, bytes uint64, d time.Duration, err error)
}

// Options of a queue pair.
type Options struct {
	// Timeout is the deadline of an operation posted without one
	// (queuepair.DefaultTimeout when zero).
	Timeout time.Duration
	// Kind names the route's backend.
	Kind backend.Kind
	// OnRelease is called once by Release, after every operation posted
	// before it completed (the manager drops its reference on the route).
	OnRelease func()
	// Observer, when not nil, sees every operation's outcome.
	Observer Observer
}

var _ Resolver = (*memreg.Registry)(nil)

// RunCompleter is implemented by the backend.Completer of package
// queuepair's work requests. A backend that finishes a run of requests
// together in the poster's goroutine (shm's inline copies of a chain)
// completes them with one CompleteRun when wrs[0].Done implements it:
// then the run is reported to its completion queue under one lock and its
// references are dropped together. CompleteRun(wrs, errs) completes
// wrs[i] with errs[i] (len(errs) == len(wrs)) exactly as
// wrs[i].Done.Complete(wrs[i], errs[i]) would, whatever each Done is;
// as with Complete, each request exactly once (backend.Completer): a
// queue pair makes a run's request done with one atomic operation,
// trusting that no other completion of it runs at the same time.
type RunCompleter interface {
	CompleteRun(wrs []*backend.WorkRequest, errs []error)
}

// InlineCompleter is implemented by the backend.Completer of package
// queuepair's work requests. A backend that completes a request inside
// its Post, in the poster's goroutine, before that Post returns (shm's
// inline copy of an operation posted on its own) may complete it with
// CompleteInline(wr, err) instead of wr.Done.Complete(wr, err): the same
// report, exactly once. The queue pair then makes the request done with
// one atomic operation where Complete takes two: no other goroutine
// completes it, and its poster, the only one who may re-arm it, is still
// in the Post.
type InlineCompleter interface {
	CompleteInline(wr *backend.WorkRequest, err error)
}

// InlineOp is one operation of an InlineRunner's run: a Put
// (backend.OpWrite) or Get (backend.OpRead) of len(Local) bytes at Offset
// in the run's remote region. Local is the poster's memory, resolved and
// held by it until RunInline returns.
type InlineOp struct {
	Local  []byte
	Offset uint64
	Op     backend.Op
}

// InlineRunner is implemented by a route that copies small Puts and Gets
// on memory it has mapped in the poster's goroutine (shm). Package
// queuepair hands it a chain's run of them directly, with no
// backend.WorkRequest built for each, and reports the outcomes itself.
type InlineRunner interface {
	// InlineMax is the largest operation, in bytes, a run may hold.
	InlineMax() int
	// RunInline copies ops in order, each on the remote region named by
	// region and key (the handles' Region and Key, checked against the
	// peer's ownership already by the caller: buffer handles of the
	// route's peer, each at most InlineMax bytes, at most 64 of them),
	// and sets errs[i] (len(errs) == len(ops), every one nil on entry)
	// to why ops[i] failed (the region's access, bounds, state; the
	// route's end), exactly as Post would have completed it, leaving it
	// nil for one that succeeded. It returns how many failed, so a caller
	// reads errs only when some did, and ok. It reports ok false, having
	// copied nothing and set nothing, when it takes no run on that region
	// now (not mapped yet, not shareable, device memory, the route
	// ended): the caller then posts the operations as requests, and the
	// route says why. Once it returns, no byte of the run is touched
	// again.
	RunInline(region uint64, key buffer.Key, ops []InlineOp, errs []error) (failed int, ok bool)
}
