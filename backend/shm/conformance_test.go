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
// (cudafake): exporting a region through CUDA IPC is later work, so the
// owner refuses to map a device region (NOT_SUPPORTED: no byte of it is
// touched as host memory) and the route sends its operations to its TCP
// fallback, which stages them.
func TestConformanceDevice(t *testing.T) {
	backendtest.RunDevice(t, backendtest.Factory{
		NewBackend: func(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry) {
			return newBackend(t, owner, shm.Config{})
		},
		WrongKeyErr:              rdmamgr.ErrBadKey,
		RevokedErr:               rdmamgr.ErrRevoked,
		DeviceRemote:             true,
		RouteSurvivesRemoteError: true,
		Verbs:                    true,
	})
}
