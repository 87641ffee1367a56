package routestate

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// State is why a route ended and what it counted. Its zero value is not
// ready: call Init before the route is used.
type State struct {
	failOnce sync.Once
	err      atomic.Pointer[error]
	done     chan struct{} // closed by SetFailed

	ops, bytesPut, bytesGot, errs atomic.Uint64
	inflight                      atomic.Int64 // operations posted and not reported
}

// Init makes s ready.
func (s *State) Init() { s.done = make(chan struct{}) }

// Done is closed once the route has failed or was closed (SetFailed).
func (s *State) Done() <-chan struct{} { return s.done }

// Err returns why the route ended (nil while it is up).
func (s *State) Err() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

// SetFailed records err as the route's error and closes Done, the first time
// only. It reports whether this call did so: the caller then tears its
// route down. Later calls return false at once, even while the first
// caller's teardown still runs.
func (s *State) SetFailed(err error) bool {
	first := false
	s.failOnce.Do(func() {
		s.err.Store(&err)
		close(s.done)
		first = true
	})
	return first
}

// Stats returns the route's counters.
func (s *State) Stats() backend.RouteStats {
	return backend.RouteStats{
		Ops:      s.ops.Load(),
		BytesPut: s.bytesPut.Load(),
		BytesGot: s.bytesGot.Load(),
		Errors:   s.errs.Load(),
		InFlight: int(s.inflight.Load()),
	}
}

// Begin counts an operation posted; it reports whether the route was idle
// before (so a sleeping watchdog can be woken).
func (s *State) Begin() (wasIdle bool) { return s.inflight.Add(1) == 1 }

// Unbegin takes back a Begin whose operation was never handed to the
// transport (it is not reported and not counted).
func (s *State) Unbegin() { s.inflight.Add(-1) }

// BeginN is Begin for n operations at once (a list about to be posted);
// UnbeginN takes back those of them never handed to the transport.
func (s *State) BeginN(n int) (wasIdle bool) { return s.inflight.Add(int64(n)) == int64(n) }

// UnbeginN takes back n of BeginN's operations.
func (s *State) UnbeginN(n int) { s.inflight.Add(-int64(n)) }

// End counts the outcome of an operation about to be reported with err.
func (s *State) End(wr *backend.WorkRequest, err error) {
	s.inflight.Add(-1)
	s.Count(wr, err)
}

// Tally adds up the outcomes of a batch of operations, for one EndTally:
// a few shared counters written once per batch, not per operation. The
// zero value is empty; it is not safe for concurrent use.
type Tally struct{ n, ops, put, got, errs uint64 }

// Add counts one operation's outcome, as End would.
func (t *Tally) Add(wr *backend.WorkRequest, err error) {
	t.n++
	if err != nil {
		t.errs++
		return
	}
	t.ops++
	switch wr.Op {
	case backend.OpWrite, backend.OpWriteImm, backend.OpSend:
		t.put += uint64(len(wr.Local))
	case backend.OpRead:
		t.got += uint64(len(wr.Local))
	}
}

// EndTally is End for every operation t counted, which are about to be
// reported; t is empty after.
func (s *State) EndTally(t *Tally) {
	if t.n == 0 {
		return
	}
	s.inflight.Add(-int64(t.n))
	s.CountMany(t.ops, t.put, t.got, t.errs)
	*t = Tally{}
}

// Count counts the outcome of an operation reported at once, inside its
// Post (never in flight, so without Begin).
func (s *State) Count(wr *backend.WorkRequest, err error) {
	if err != nil {
		s.errs.Add(1)
		return
	}
	s.ops.Add(1)
	switch wr.Op {
	case backend.OpWrite, backend.OpWriteImm, backend.OpSend:
		s.bytesPut.Add(uint64(len(wr.Local)))
	case backend.OpRead:
		s.bytesGot.Add(uint64(len(wr.Local)))
	}
}

// CountMany counts outcomes reported at once, like Count: ops that
// succeeded moving put and got bytes, errs that failed.
func (s *State) CountMany(ops, put, got, errs uint64) {
	if ops != 0 {
		s.ops.Add(ops)
	}
	if put != 0 {
		s.bytesPut.Add(put)
	}
	if got != 0 {
		s.bytesGot.Add(got)
	}
	if errs != 0 {
		s.errs.Add(errs)
	}
}

// InFlight returns the operations posted and not yet reported.
func (s *State) InFlight() int64 { return s.inflight.Load() }

// Validate checks what every backend checks of a work request before it
// posts it: a known operation, local and remote lengths equal and not
// zero, and a remote range whose end does not overflow (a backend that
// splits the request adds offsets to Remote.Offset). name prefixes the
// errors ("tcp", "ibverbs").
func Validate(name string, wr *backend.WorkRequest) error {
	if wr.Op != backend.OpWrite && wr.Op != backend.OpRead {
		if wr.Op >= backend.OpWriteImm && wr.Op <= backend.OpFetchAdd {
			return fmt.Errorf("%s: %s: %w", name, wr.Op, rdmamgr.ErrNotSupported)
		}
		return fmt.Errorf("%s: op %d: %w", name, wr.Op, rdmamgr.ErrProtocol)
	}
	return validate(name, wr)
}

// ValidateAll is Validate for a backend that carries every operation:
// a Send has a local message and no remote buffer; an atomic has no local
// memory and one 8-byte word at an 8-byte aligned offset of its remote
// buffer (the owner checks the word's address).
func ValidateAll(name string, wr *backend.WorkRequest) error {
	switch wr.Op {
	case backend.OpWrite, backend.OpRead, backend.OpWriteImm:
		return validate(name, wr)
	case backend.OpSend:
		if len(wr.Local) == 0 {
			return fmt.Errorf("%s: send of 0 bytes: %w", name, rdmamgr.ErrProtocol)
		}
		return nil
	case backend.OpCompareSwap, backend.OpFetchAdd:
		if len(wr.Local) != 0 || wr.Remote.Length != 8 || wr.Remote.Offset%8 != 0 {
			return fmt.Errorf("%s: %s on %d bytes at offset %d: %w", name, wr.Op, wr.Remote.Length, wr.Remote.Offset, rdmamgr.ErrMisaligned)
		}
		return nil
	}
	return fmt.Errorf("%s: op %d: %w", name, wr.Op, rdmamgr.ErrProtocol)
}

func validate(name string, wr *backend.WorkRequest) error {
	n := uint64(len(wr.Local))
	if n == 0 || n != wr.Remote.Length {
		return fmt.Errorf("%s: local %d bytes, remote %d: %w", name, n, wr.Remote.Length, rdmamgr.ErrProtocol)
	}
	if wr.Remote.Offset+n < wr.Remote.Offset {
		return fmt.Errorf("%s: remote offset %d + %d bytes overflows: %w", name, wr.Remote.Offset, n, rdmamgr.ErrOutOfRange)
	}
	return nil
}

// OpError is the error of one operation ended early: "NAME: OP of N bytes:
// CAUSE" (a cancellation's cause, or rdmamgr.ErrDeadline).
func OpError(name string, wr *backend.WorkRequest, cause error) error {
	return fmt.Errorf("%s: %s of %d bytes: %w", name, wr.Op, len(wr.Local), cause)
}
