package backend

import (
	"context"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// Kind names a backend.
type Kind string

const (
	KindTCP     Kind = "tcp"
	KindIBVerbs Kind = "ibverbs"
)

// Op is a one-sided operation.
type Op uint8

const (
	// OpWrite copies local memory into the remote buffer (Put).
	OpWrite Op = 1
	// OpRead copies the remote buffer into local memory (Get).
	OpRead Op = 2
)

func (o Op) String() string {
	switch o {
	case OpWrite:
		return "write"
	case OpRead:
		return "read"
	}
	return "op(?)"
}

// Need returns the access the remote buffer must grant for o.
func (o Op) Need() buffer.Access {
	if o == OpWrite {
		return buffer.AccessWrite
	}
	return buffer.AccessRead
}

// Completer receives the outcome of a work request, exactly once.
type Completer interface {
	Complete(wr *WorkRequest, err error)
}

// WorkRequest is one operation posted on a Route. The poster fills it and
// must not touch it until Complete is called.
type WorkRequest struct {
	Op    Op
	Local []byte // local memory, already resolved and referenced; len == Remote.Length
	// LocalRegion is the region Local lies in (its BackendData and RDMA
	// keys give an RDMA backend the local key).
	LocalRegion *buffer.Region
	Remote      buffer.Buffer // remote handle, already validated as owned by the route's peer
	Deadline    time.Time     // the backend fails the request with ErrDeadline after it
	Done        Completer
	// Ctx is free for the poster (e.g. the queue pair's bookkeeping).
	Ctx any
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
	// Err returns why the route ended (nil while it is up).
	Err() error
	// Stats returns counters of the route.
	Stats() RouteStats
	// Close fails in-flight requests with ErrClosed and waits for the
	// route's goroutines. Idempotent.
	Close() error
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
