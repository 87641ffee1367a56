//go:build linux

package shm_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// A peer on this host of a uid we do not serve is refused with a reason
// that says so (issue 23: it said "peer is not on this host"), still
// matching ErrNotSameHost and ErrNotSupported; an allowed uid is served.
func TestUIDRefusalSaysWhatItIs(t *testing.T) {
	other := os.Getuid() + 4242
	b, reg := newBackend(t, backendtest.OwnerB, shm.Config{AllowUIDs: []int{other + 1}})
	backendtest.CloseAtCleanup(t, timeout, b, reg)
	_, err := b.AcceptRoute(context.Background(), backendtest.OwnerA, shm.EncodeInfo(uint32(os.Getpid()), uint32(other)))
	if !errors.Is(err, shm.ErrNotSameHost) || !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("AcceptRoute of uid %d: %v, want ErrNotSameHost and ErrNotSupported", other, err)
	}
	if msg := err.Error(); strings.Contains(msg, "not on this host") || !strings.Contains(msg, "--shm-allow-uid") ||
		strings.Count(msg, "not supported") != 1 {
		t.Errorf(`refusal reads %q: want the uid named, --shm-allow-uid, no "not on this host", the sentinel once`, msg)
	}
	if _, err := b.AcceptRoute(context.Background(), backendtest.OwnerA, shm.EncodeInfo(uint32(os.Getpid()), uint32(other+1))); err != nil {
		t.Errorf("AcceptRoute of allowed uid %d: %v", other+1, err)
	}
}
