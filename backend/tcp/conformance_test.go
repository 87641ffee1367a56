package tcp_test

import (
	"context"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/tcp"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
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
		WrongKeyErr:              rdmamgr.ErrBadKey,
		ReleasedErr:              rdmamgr.ErrReleased,
		OutOfRangeErr:            rdmamgr.ErrOutOfRange,
		RevokedErr:               rdmamgr.ErrRevoked,
		RouteSurvivesRemoteError: true,
		Verbs:                    true,
	})
}

// TestVerbsSmallChunks runs the verbs suite with 4 KiB chunks over four
// connections: a write-imm is many frames on the lane, every other
// operation is striped.
func TestVerbsSmallChunks(t *testing.T) {
	backendtest.RunVerbs(t, backendtest.Factory{
		NewBackend: func(t testing.TB, owner uint64) (backend.Backend, *memreg.Registry) {
			t.Helper()
			reg := memreg.NewRegistry(owner, buffer.Limits{})
			b, err := tcp.New(tcp.Config{ChunkSize: 4096, ConnsPerRoute: 4}, reg, nil)
			if err != nil {
				t.Fatalf("tcp.New: %v", err)
			}
			if err := b.Start(context.Background()); err != nil {
				t.Fatalf("Start: %v", err)
			}
			return b, reg
		},
		RouteSurvivesRemoteError: true,
	})
}

// TestConformanceDevice runs the suite's device-memory variant over TCP
// (cudafake): the owner serves Puts and Gets of its device memory
// through staging.
func TestConformanceDevice(t *testing.T) {
	backendtest.RunDevice(t, backendtest.Factory{
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
		WrongKeyErr:              rdmamgr.ErrBadKey,
		RevokedErr:               rdmamgr.ErrRevoked,
		DeviceRemote:             true,
		RouteSurvivesRemoteError: true,
		Verbs:                    true,
	})
}
