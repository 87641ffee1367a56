//go:build ibverbs

package ibverbs

import (
	"context"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// factory returns a conformance factory for backends built with cfg.
func factory(cfg Config) backendtest.Factory {
	return backendtest.Factory{
		NewBackend: func(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry) {
			t.Helper()
			return newStarted(t, cfg, owner)
		},
		// The device checks the rkey and the MR's bounds and access: each
		// failure is a remote access error.
		WrongKeyErr:              rdmamgr.ErrAccess,
		ReleasedErr:              rdmamgr.ErrAccess,
		OutOfRangeErr:            rdmamgr.ErrAccess,
		RevokedErr:               rdmamgr.ErrAccess,
		RouteSurvivesRemoteError: false,
		Verbs:                    true,
	}
}

// newStarted returns a started backend over a fresh registry of owner
// (the caller closes both).
func newStarted(t testing.TB, cfg Config, owner uint64) (*Backend, *memreg.Registry) {
	t.Helper()
	reg := memreg.NewRegistry(owner, buffer.Limits{})
	b, err := newIBVerbs(cfg, reg, testLogger())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return b.(*Backend), reg
}

// TestConformance runs the backend conformance suite on the machine's RDMA
// device (rxe0 in the Soft-RoCE VM).
func TestConformance(t *testing.T) {
	requireDevices(t)
	backendtest.Run(t, factory(DefaultConfig()))
}

// TestConformanceSmallMessages runs the suite with operations split into
// many 64 KiB work requests and a small in-flight window, so that splitting
// and back-pressure are exercised on every test.
func TestConformanceSmallMessages(t *testing.T) {
	requireDevices(t)
	cfg := DefaultConfig()
	cfg.MaxMessage = 64 << 10
	cfg.MaxInFlight = 32
	f := factory(cfg)
	f.MaxSize = 1 << 20
	backendtest.Run(t, f)
}
