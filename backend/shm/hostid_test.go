//go:build linux

package shm_test

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// Config.HostID splits one kernel into hosts: an owner refuses an
// initiator of another HostID (ErrNotSameHost, so ErrNotSupported: the
// manager tries its next backend), and one of its own HostID, and only
// that, is served.
func TestHostIDRefusesAnotherHost(t *testing.T) {
	ctx := context.Background()
	owner, reg := newBackend(t, backendtest.OwnerB, shm.Config{HostID: "B"})
	backendtest.CloseAtCleanup(t, timeout, owner, reg)
	for _, tc := range []struct {
		id   string
		want error
	}{{"A", shm.ErrNotSameHost}, {"", shm.ErrNotSameHost}, {"B", nil}} {
		ini, ireg := newBackend(t, backendtest.OwnerA, shm.Config{HostID: tc.id})
		backendtest.CloseAtCleanup(t, timeout, ini, ireg)
		pr, info, err := ini.PrepareRoute(ctx, backendtest.OwnerB)
		if err != nil {
			t.Fatal(err)
		}
		_, err = owner.AcceptRoute(ctx, backendtest.OwnerA, info)
		pr.Abort()
		if !errors.Is(err, tc.want) || (tc.want != nil && !errors.Is(err, rdmamgr.ErrNotSupported)) {
			t.Errorf("initiator of host id %q to an owner of B: %v, want %v", tc.id, err, tc.want)
		}
	}
}
