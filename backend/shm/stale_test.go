//go:build linux

package shm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
)

// TestStaleMappingRefused: a copy through a mapping taken before Revoke
// (or Release) returned, as a peer that missed every notice would make,
// is refused by the region's state word, and changes nothing.
func TestStaleMappingRefused(t *testing.T) {
	const tmo = 30 * time.Second
	start := func(owner uint64) (*Backend, *memreg.Registry) {
		reg := memreg.NewRegistry(owner, buffer.Limits{})
		b, err := New(Config{}, reg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		backendtest.CloseAtCleanup(t, tmo, b, reg)
		return b, reg
	}
	a, regA := start(backendtest.OwnerA)
	b, regB := start(backendtest.OwnerB)
	rt := backendtest.MustConnect(t, tmo, a, b, backendtest.OwnerB, backendtest.OwnerA).(*route)
	ha, la := backendtest.Alloc(t, regA, 4096, buffer.AccessReadWrite)
	for _, how := range []string{"revoke", "release"} {
		hb, lb := backendtest.Alloc(t, regB, 4096, buffer.AccessReadWrite)
		if err := backendtest.Do(t, tmo, rt, regA, backend.OpWrite, ha, hb); err != nil {
			t.Fatalf("%s: first put: %v", how, err)
		}
		e := rt.cache.get(hb.Region, hb.Key)
		if e == nil {
			t.Fatalf("%s: region not mapped after a put", how)
		}
		want := rdmamgr.ErrRevoked
		if how == "revoke" {
			if err := regB.Revoke(t.Context(), hb); err != nil {
				t.Fatal(err)
			}
			for i := range lb {
				lb[i] = 0x55
			}
		} else {
			want = rdmamgr.ErrReleased
			if err := regB.Release(t.Context(), hb); err != nil {
				t.Fatal(err)
			}
		}
		for i := range la {
			la[i] = 0xAA
		}
		wr, release := backendtest.NewWR(t, regA, backend.OpWrite, ha, hb, time.Now().Add(tmo), nil)
		err := rt.copy(e, wr, false)
		release()
		rt.cache.unref(e)
		if !errors.Is(err, want) {
			t.Fatalf("%s: copy through the stale mapping: %v, want %v", how, err, want)
		}
		if how == "revoke" {
			for i, c := range lb {
				if c != 0x55 {
					t.Fatalf("byte %d of the revoked region changed", i)
				}
			}
		}
	}
}
