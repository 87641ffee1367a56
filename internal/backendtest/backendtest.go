package backendtest

import (
	"cmp"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// Owner ids of the two managers of a subtest.
const (
	OwnerA = 0xA11CE
	OwnerB = 0xB0B
)

// Factory builds backends and declares what the backend reports where
// backends legitimately differ.
type Factory struct {
	// NewBackend returns a started backend serving a fresh registry of the
	// manager owner. The suite closes the backend, then the registry.
	NewBackend func(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry)
	// WrongKeyErr is what an operation with a wrong key fails with
	// (errors.Is): TCP checks the region key (rdmamgr.ErrBadKey); RDMA
	// hardware checks the rkey and reports a remote access error
	// (rdmamgr.ErrAccess).
	WrongKeyErr error
	// ReleasedErr is what an operation on a region its owner released fails
	// with: rdmamgr.ErrReleased for TCP, a remote access error for RDMA.
	ReleasedErr error
	// OutOfRangeErr is what an operation on a forged handle that reaches
	// past its region fails with: rdmamgr.ErrOutOfRange for TCP, a remote
	// access error for RDMA.
	OutOfRangeErr error
	// RevokedErr is what an operation on a region its owner revoked
	// (Registry.Revoke) fails with: rdmamgr.ErrRevoked for TCP, a remote
	// access error for RDMA. Nil skips the revocation test.
	RevokedErr error
	// RouteSurvivesRemoteError: the route keeps working after the peer
	// refused an operation (TCP). An RDMA RC queue pair goes to the error
	// state instead: the route fails and the manager builds a new one.
	RouteSurvivesRemoteError bool
	// Verbs runs the suite of PutWithImm, Send and the atomics too
	// (verbs.go): B must implement backend.InboxUser; an operation that
	// A's backend.Capabilities says its routes do not carry is skipped.
	Verbs bool
	// NotifyDeniedErr is what a PutWithImm to a buffer without
	// AccessNotify (or AccessWrite) fails with; AtomicDeniedErr an atomic
	// on a buffer without AccessAtomic; MisalignedBaseErr an atomic at an
	// aligned offset of a region registered at an address that is not
	// 8-byte aligned. Nil: rdmamgr.ErrAccess, rdmamgr.ErrAccess,
	// rdmamgr.ErrMisaligned.
	NotifyDeniedErr, AtomicDeniedErr, MisalignedBaseErr error
	// DeviceRemote: the backend moves WRITEs and READs of a peer's
	// device memory (RunDevice; TCP stages it): else it refuses them with
	// rdmamgr.ErrNotSupported.
	DeviceRemote bool
	// MaxSize is the largest operation the suite moves (16 MiB if 0).
	MaxSize int
	// Timeout bounds every wait (hang guard, not an assertion; 2 min if 0).
	Timeout time.Duration
}

// Run runs the suite.
func Run(t *testing.T, f Factory) {
	f = f.withDefaults(t)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"PutGetSizesOffsets", testPutGet},
		{"ManyInFlight", testManyInFlight},
		{"WriteToReadOnly", testWriteReadOnly},
		{"ReadFromWriteOnly", testReadWriteOnly},
		{"WrongKey", testWrongKey},
		{"ReleasedRegion", testReleased},
		{"OutOfRange", testOutOfRange},
		{"RevokedRegion", testRevoked},
		{"NoCompletionOnPostError", testLengthMismatch},
		{"RouteCloseFailsLaterPosts", testRouteClose},
		{"RouteCloseWithWorkInFlight", testRouteCloseInFlight},
		{"BackendCloseIdempotent", testBackendClose},
		{"HostileRouteInfo", testHostileInfo},
		{"Stats", testStats},
		{"CancelAndDeadlineIsolation", testCancel},
		{"CompletionQueue", RunCQ}, // cq.go: the checks again through queuepair
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
	if f.Verbs {
		t.Run("Verbs", func(t *testing.T) { RunVerbs(t, f) }) // verbs.go
	}
}

// withDefaults fills the zero fields of f.
func (f Factory) withDefaults(t *testing.T) Factory {
	if f.NewBackend == nil {
		t.Fatal("backendtest: Factory.NewBackend is nil")
	}
	if f.MaxSize == 0 {
		f.MaxSize = 16 << 20
	}
	if f.Timeout == 0 {
		f.Timeout = 2 * time.Minute
	}
	f.NotifyDeniedErr = cmp.Or(f.NotifyDeniedErr, rdmamgr.ErrAccess)
	f.AtomicDeniedErr = cmp.Or(f.AtomicDeniedErr, rdmamgr.ErrAccess)
	f.MisalignedBaseErr = cmp.Or(f.MisalignedBaseErr, rdmamgr.ErrMisaligned)
	return f
}
