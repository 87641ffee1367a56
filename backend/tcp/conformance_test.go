package tcp_test

import (
	"context"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/backendtest"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// TestConformance runs the backend conformance suite over TCP on loopback.
func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Factory{
		NewBackend: func(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry) {
			t.Helper()
			reg := memreg.NewRegistry(owner, buffer.Limits{})
			b, err := tcp.New(tcp.Config{ListenAddr: "127.0.0.1:0"}, reg, nil)
			if err != nil {
				t.Fatalf("tcp.New: %v", err)
			}
			if err := b.Start(context.Background()); err != nil {
				t.Fatalf("Start: %v", err)
			}
			return b, reg
		},
		WrongKeyErr:              buffer.ErrBadKey,
		ReleasedErr:              buffer.ErrReleased,
		OutOfRangeErr:            buffer.ErrOutOfRange,
		RevokedErr:               buffer.ErrRevoked,
		RouteSurvivesRemoteError: true,
		Verbs:                    true,
	})
}
