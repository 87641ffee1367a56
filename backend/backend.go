package backend

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// Kind names a backend.
type Kind string

const (
	KindTCP     Kind = "tcp"
	KindIBVerbs Kind = "ibverbs"
	// KindSHM is the same-host shared-memory backend (backend/shm).
	KindSHM Kind = "shm"
	// KindAgent reaches processes of other hosts through the host agents
	// both ends attached to (backend/agent).
	KindAgent Kind = "agent"
)

// Op is a one-sided operation.
type Op uint8

const (
	// OpWrite copies local memory into the remote buffer (Put).
	OpWrite Op = 1
	// OpRead copies the remote buffer into local memory (Get).
	OpRead Op = 2
	// OpWriteImm is OpWrite followed, once the bytes are in place, by an
	// Event for the owner's subscriber carrying Imm (PutWithImm).
	OpWriteImm Op = 3
	// OpSend moves Local into the receive buffer the peer posted next
	// (Send; with HasImm, SendWithImm). Remote is unused (zero).
	OpSend Op = 4
	// OpCompareSwap sets the 8-byte word Remote names to Swap if it equals
	// Compare; Result is the word's old value. Local is unused (nil).
	OpCompareSwap Op = 5
	// OpFetchAdd adds Swap to the 8-byte word Remote names; Result is the
	// word's old value. Local is unused (nil).
	OpFetchAdd Op = 6
)

func (o Op) String() string {
	switch o {
	case OpWrite:
		return "write"
	case OpRead:
		return "read"
	case OpWriteImm:
		return "write-imm"
	case OpSend:
		return "send"
	case OpCompareSwap:
		return "compare-swap"
	case OpFetchAdd:
		return "fetch-add"
	}
	return "op(?)"
}

// Need returns the access the remote buffer must grant for o (none for a
// Send, which names no remote buffer).
func (o Op) Need() buffer.Access {
	switch o {
	case OpWrite:
		return buffer.AccessWrite
	case OpWriteImm:
		return buffer.AccessWrite | buffer.AccessNotify
	case OpCompareSwap, OpFetchAdd:
		return buffer.AccessAtomic
	case OpSend:
		return 0
	}
	return buffer.AccessRead
}

// Atomic reports whether o is an atomic on one 8-byte word.
func (o Op) Atomic() bool { return o == OpCompareSwap || o == OpFetchAdd }

// Completer receives the outcome of a work request, exactly once.
type Completer interface {
	Complete(wr *WorkRequest, err error)
}

// WorkRequest is one operation posted on a Route. The poster fills it and
// must not touch it until Complete is called.
//
// Op, cause, Result and Local come first: after the hot fields of
// package queuepair's request, they keep a re-posted small operation on
// that request's first two cache lines.
type WorkRequest struct {
	Op    Op
	cause atomic.Pointer[error] // set once by RequestCancel
	// Result is the old value of an atomic's word, set by the backend
	// before Complete when the atomic succeeded.
	Result uint64
	Local  []byte // local memory, already resolved and referenced; len == Remote.Length
	// LocalRegion is the registered region Local lies in, set by package
	// queuepair for the module's RDMA backend (its keys give the local
	// key); it is opaque outside the module, which is why it is an any.
	LocalRegion any
	Remote      buffer.Buffer // remote handle, already validated as owned by the route's peer
	Deadline    time.Time     // the backend fails the request with ErrDeadline after it
	Done        Completer
	// Cancel, when not nil, ends Post's wait for room in flight when it is
	// closed (the poster's context). Cancelling a posted request is
	// RequestCancel followed by Route.Cancel.
	Cancel <-chan struct{}

	// Imm is the immediate value of OpWriteImm, and of OpSend when HasImm.
	Imm    uint32
	HasImm bool
	// Waited says the poster means to wait for this operation on its own
	// (package queuepair: a single verb, no completion queue), so a route
	// that is a Driver may leave reading its outcome to that wait. The
	// poster calls Driver.Undrive if it polls the operation instead.
	Waited bool
	// Compare and Swap are the operands of OpCompareSwap; Swap is the
	// addend of OpFetchAdd.
	Compare, Swap uint64

	// Via names the target process at the peer when the peer is a host
	// agent: its slot there (0: none; the peer's own memory). A peer that
	// is not an agent refuses a request with Via with ErrNotSupported.
	// Set only by the module's agent; TCP carries it.
	Via uint16
	// Origin is the manager the request is posted for when a host agent
	// posts it for an attached process (0: the route's own manager). The
	// event of an OpWriteImm and the message of an OpSend name it as
	// their Peer at the owner (honoured only with Via, by an agent).
	Origin uint64

	// Scratch is the backend's, never the poster's: what a route built
	// for wr's last post (TCP: its op and chunks), which it may reuse on
	// the next post of wr (by any route of the same backend, which checks
	// the type) once the last one completed. Reset keeps it.
	Scratch any
}

// RequestCancel records why wr should end early; the first cause wins and
// it reports whether this call set it. The poster then calls Route.Cancel
// (a backend also checks the cause when it queues or sends wr, so a cause
// set while Post runs is not lost). The poster clears it by Reset.
//
// A backend checks the cause as it enters wr where its Cancel looks, under
// the lock that Cancel's scan holds (whichever comes second ends wr); it
// never calls Cancel itself once wr is queued: by then wr may have
// completed and its poster posted it again, and a late Cancel would end
// that new post.
func (wr *WorkRequest) RequestCancel(cause error) bool {
	return wr.cause.CompareAndSwap(nil, &cause)
}

// CancelCause returns the cause given to RequestCancel, or nil.
func (wr *WorkRequest) CancelCause() error {
	if p := wr.cause.Load(); p != nil {
		return *p
	}
	return nil
}

// Reset clears wr for reuse by its poster (only when it is not posted).
func (wr *WorkRequest) Reset() {
	wr.Op, wr.Local, wr.LocalRegion, wr.Remote = 0, nil, nil, buffer.Buffer{}
	wr.Deadline, wr.Done, wr.Cancel = time.Time{}, nil, nil
	wr.Imm, wr.HasImm, wr.Compare, wr.Swap, wr.Result = 0, false, 0, 0, 0
	wr.Waited = false
	wr.Via, wr.Origin = 0, 0
	if wr.cause.Load() != nil { // a store costs a barrier: only when there is one to clear
		wr.cause.Store(nil)
	}
}

// PendingRoute is the initiator's half-made route between PrepareRoute and
// Complete. Abort releases it if the handshake fails.
type PendingRoute interface {
	Complete(ctx context.Context, peerInfo []byte) (Route, error)
	Abort()
}

// Route is a connected path to one peer manager.
type Route interface {
	// Post queues wr. It returns at once unless the route is at its in-flight
	// limit, in which case it waits (back-pressure) until there is room, the
	// request's deadline passes or the route fails. A non-nil error means wr
	// was not posted and Done will not be called.
	Post(wr *WorkRequest) error
	// Done is closed when the route has failed or was closed.
	Done() <-chan struct{}
	// Cancel ends a posted wr early with wr.CancelCause() (set by
	// RequestCancel before the call). It returns at once; Done.Complete is
	// still called exactly once, and only after the backend can no longer
	// touch wr.Local, promptly: no later than the bytes of it that are on
	// the wire or on the device now take to move (TCP interrupts a stalled
	// socket read or write and drains the rest into a sink; an RDMA device
	// finishes the work requests it was given). The outcome is the cause,
	// unless wr completed first. One request's cancellation never fails
	// another's. A wr that is not posted here (or completed) is ignored.
	Cancel(wr *WorkRequest)
	// Err returns why the route ended (nil while it is up).
	Err() error
	// Stats returns counters of the route.
	Stats() RouteStats
	// Close fails in-flight requests with ErrClosed and waits for the
	// route's goroutines. Idempotent.
	Close() error
}

// ListPoster is an optional interface of a Route: posting a chain of work
// requests at the cost of one (one lock, one wake-up of whatever sends:
// one doorbell, as ibv_post_send with a chain). PostList posts wrs in
// order; n is how many it posted. If n < len(wrs), wrs[n] was not posted
// and err says why (as Post's error would), and wrs[n+1:] are untouched:
// the poster posts or fails them itself. It may wait for room in flight
// as Post does, under each request's Cancel and Deadline. A posted
// request completes through its Done exactly once, as after Post. The
// slice is the caller's (reused for the next chain): PostList keeps the
// requests, never the slice.
// queuepair.QueuePair.PostOps uses it when the route has it, and a loop
// of Post otherwise.
type ListPoster interface {
	PostList(wrs []*WorkRequest) (n int, err error)
}

// Driver is an optional interface of a Route whose waiter can read the
// route's answers itself: the network poller then wakes the waiting
// goroutine directly, with no hand-off from a reader goroutine (TCP).
// Package queuepair calls Drive from Wait for an operation posted with
// Waited, before it spins or parks, and Undrive from Poll, Err, Done and
// Cancel of such an operation.
type Driver interface {
	// Drive reads answers in the caller's goroutine while the route lends
	// it the means to, until wr has been reported, ctx ended (noticed
	// within the route's watchdog tick) or the route takes the means back;
	// it may return at once. Either way the caller then waits as usual:
	// Drive reports nothing and Done.Complete is still called exactly once.
	Drive(ctx context.Context, wr *WorkRequest)
	// Undrive says wr's outcome will not be driven by a wait: the route
	// reads it itself.
	Undrive(wr *WorkRequest)
}

// SlowCompleter is an optional interface of a Route: SlowCompletions
// reports true when its operations take long enough (hundreds of
// microseconds: the host agent's relay) that a waiter should park at once
// rather than spin for the outcome, which would only burn the waiter's
// CPU. queuepair reads it once, when a queue pair is bound to the route;
// a route without it is taken as fast (waits spin a little first).
type SlowCompleter interface {
	SlowCompletions() bool
}

// RouteStats are counters of a Route.
type RouteStats struct {
	Ops      uint64
	BytesPut uint64
	BytesGot uint64
	Errors   uint64
	InFlight int
}

// ServedStats are counters of requests served for peers.
type ServedStats struct {
	Ops      uint64
	BytesIn  uint64 // written into our memory
	BytesOut uint64 // read from our memory
	Rejected uint64 // refused: key, access, bounds, released, malformed
	AuthFail uint64 // connections refused at authentication
}

// Backend is one data plane of a manager.
type Backend interface {
	Kind() Kind
	// Start begins I/O (for TCP: the data listener).
	Start(ctx context.Context) error
	// Addr describes where peers reach the backend (for status).
	Addr() string
	// PrepareRoute starts a route to peer as initiator and returns the
	// endpoint info for the peer's AcceptRoute.
	PrepareRoute(ctx context.Context, peerID uint64) (PendingRoute, []byte, error)
	// AcceptRoute answers a peer's PrepareRoute info with ours. It must not
	// block on the network for long: it runs on the manager's behalf.
	AcceptRoute(ctx context.Context, peerID uint64, info []byte) ([]byte, error)
	// Served returns counters of requests served for peers.
	Served() ServedStats
	// Close stops the backend and waits for its goroutines. Idempotent.
	Close() error
}
