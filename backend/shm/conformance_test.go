//go:build linux

package shm_test

import (
	"context"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// newBackend returns a started shm backend over a fresh registry of
// owner, with a TCP fallback on loopback (closed at the end of the test,
// after the shm backend and the registry).
func newBackend(t testing.TB, owner uint64, cfg shm.Config) (*shm.Backend, *memreg.Registry) {
	t.Helper()
	reg := memreg.NewRegistry(owner, buffer.Limits{})
	fb, err := wiring.NewBackend[*tcp.Backend](tcp.Config{ListenAddr: "127.0.0.1:0", Secret: cfg.Secret}, reg, nil)
	if err != nil {
		t.Fatalf("tcp.New: %v", err)
	}
	if err := fb.Start(context.Background()); err != nil {
		t.Fatalf("tcp Start: %v", err)
	}
	t.Cleanup(func() { fb.Close() })
	cfg.Fallback = fb
	b, err := shm.New(cfg, reg, nil)
	if err != nil {
		t.Fatalf("shm.New: %v", err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatalf("shm Start: %v", err)
	}
	return b, reg
}

// TestConformance runs the backend conformance suite over shm between two
// backends of this process (the same code path as two processes: the
// memory is reached through the memfds passed over the socket).
func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Factory{
		NewBackend: func(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry) {
			return newBackend(t, owner, shm.Config{})
		},
		WrongKeyErr:              rdmamgr.ErrBadKey,
		ReleasedErr:              rdmamgr.ErrReleased,
		OutOfRangeErr:            rdmamgr.ErrOutOfRange,
		RevokedErr:               rdmamgr.ErrRevoked,
		RouteSurvivesRemoteError: true,
		Verbs:                    true,
	})
}

// TestConformanceDevice runs the suite's device-memory variant over shm
// (cudafake): the peer's read-write device region (an allocation of its
// own) is opened through CUDA IPC, once, and its Puts and Gets staged by
// the route itself; its read-only region is not exported (an IPC mapping
// writes) and goes to the TCP fallback, which refuses the Put.
func TestConformanceDevice(t *testing.T) {
	var initiator *shm.Backend
	backendtest.RunDevice(t, backendtest.Factory{
		NewBackend: func(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry) {
			b, reg := newBackend(t, owner, shm.Config{})
			if owner == backendtest.OwnerA {
				initiator = b
			}
			return b, reg
		},
		WrongKeyErr:              rdmamgr.ErrBadKey,
		RevokedErr:               rdmamgr.ErrRevoked,
		DeviceRemote:             true,
		RouteSurvivesRemoteError: true,
		Verbs:                    true,
	})
	if n := initiator.IPCOpens(); n != 1 {
		t.Fatalf("the initiator opened %d device regions through CUDA IPC, want 1 (the read-write one)", n)
	}
}
