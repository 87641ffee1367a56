//go:build linux

package shm

import (
	"bytes"
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

// listPair is a route from A to B for the PostList tests.
func listPair(t *testing.T) (rt *route, regA, regB *memreg.Registry) {
	t.Helper()
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
	return backendtest.MustConnect(t, tmo, a, b, backendtest.OwnerB, backendtest.OwnerA).(*route), regA, regB
}

// TestPostList: a chain of Puts, then of Gets, on a mapped region (runs
// copied under one enter) and on one not yet mapped (queued) lands every
// byte; an out-of-range Put inside a run fails alone; a malformed request
// stops the chain there: n is its index, and nothing after it is posted.
func TestPostList(t *testing.T) {
	const tmo = 30 * time.Second
	rt, regA, regB := listPair(t)
	const n, k = 64, 40
	hLocal, local := backendtest.Alloc(t, regA, n*k, buffer.AccessReadWrite)
	hMapped, mapped := backendtest.Alloc(t, regB, n*k, buffer.AccessReadWrite)
	hFresh, fresh := backendtest.Alloc(t, regB, n, buffer.AccessReadWrite)
	if err := backendtest.Do(t, tmo, rt, regA, backend.OpWrite, backendtest.Slice(t, hLocal, 0, n), backendtest.Slice(t, hMapped, 0, n)); err != nil {
		t.Fatal(err) // maps hMapped
	}
	backendtest.Random(t, local)
	want := bytes.Clone(local)
	rec := backendtest.NewRecorder(3 * k)
	var wrs []*backend.WorkRequest
	add := func(op backend.Op, l, r buffer.Buffer) *backend.WorkRequest {
		wr, release := backendtest.NewWR(t, regA, op, l, r, time.Now().Add(tmo), rec)
		t.Cleanup(release)
		wrs = append(wrs, wr)
		return wr
	}
	for i := range k {
		add(backend.OpWrite, backendtest.Slice(t, hLocal, i*n, n), backendtest.Slice(t, hMapped, i*n, n))
	}
	add(backend.OpWrite, backendtest.Slice(t, hLocal, 0, n), hFresh) // first use: queued
	bad := add(backend.OpWrite, backendtest.Slice(t, hLocal, 0, n), backendtest.Slice(t, hMapped, 0, n))
	bad.Remote.Offset = uint64(n * k) // past the region: fails alone
	add(backend.OpWrite, backendtest.Slice(t, hLocal, n, n), backendtest.Slice(t, hMapped, n, n))
	got, err := rt.PostList(wrs)
	if err != nil || got != len(wrs) {
		t.Fatalf("PostList: %d, %v; want %d posted", got, err, len(wrs))
	}
	results := map[*backend.WorkRequest]error{}
	for range wrs {
		r := rec.Wait(t, tmo)
		if _, dup := results[r.WR]; dup {
			t.Fatal("a work request completed twice")
		}
		results[r.WR] = r.Err
	}
	for _, wr := range wrs {
		err := results[wr]
		if wr == bad {
			if !errors.Is(err, rdmamgr.ErrOutOfRange) {
				t.Fatalf("Put past the region: %v, want ErrOutOfRange", err)
			}
		} else if err != nil {
			t.Fatalf("%s: %v", wr.Op, err)
		}
	}
	backendtest.AssertSame(t, "mapped region after the Puts", mapped, want)
	backendtest.AssertSame(t, "fresh region after its Put", fresh, want[:n])

	// Gets back into zeroed local memory; a malformed one stops the chain.
	clear(local)
	wrs = wrs[:0]
	for i := range k {
		add(backend.OpRead, backendtest.Slice(t, hLocal, i*n, n), backendtest.Slice(t, hMapped, i*n, n))
	}
	stop := add(backend.OpRead, backendtest.Slice(t, hLocal, 0, n), backendtest.Slice(t, hMapped, 0, n))
	stop.Remote.Length = n + 1 // local and remote lengths differ: not posted
	add(backend.OpRead, backendtest.Slice(t, hLocal, 0, n), backendtest.Slice(t, hMapped, 0, n))
	got, err = rt.PostList(wrs)
	if got != k || !errors.Is(err, rdmamgr.ErrProtocol) {
		t.Fatalf("PostList with a malformed request at %d: %d, %v; want %d and ErrProtocol", k, got, err, k)
	}
	for range k {
		if r := rec.Wait(t, tmo); r.Err != nil {
			t.Fatalf("Get: %v", r.Err)
		}
	}
	rec.None(t) // neither the malformed request nor the one after it
	backendtest.AssertSame(t, "local memory after the Gets", local, want)
}

// TestPostListStale: a run through a mapping taken before Revoke returned
// (a peer that missed every notice) is refused, each request with
// ErrRevoked, and changes no byte of the region.
func TestPostListStale(t *testing.T) {
	const tmo = 30 * time.Second
	rt, regA, regB := listPair(t)
	ha, la := backendtest.Alloc(t, regA, 4096, buffer.AccessReadWrite)
	hb, lb := backendtest.Alloc(t, regB, 4096, buffer.AccessReadWrite)
	if err := backendtest.Do(t, tmo, rt, regA, backend.OpWrite, ha, hb); err != nil {
		t.Fatal(err)
	}
	e := rt.cache.get(hb.Region, hb.Key)
	if e == nil {
		t.Fatal("region not mapped after a put")
	}
	if err := regB.Revoke(t.Context(), hb); err != nil {
		t.Fatal(err)
	}
	for i := range lb {
		lb[i] = 0x55
	}
	for i := range la {
		la[i] = 0xAA
	}
	rec := backendtest.NewRecorder(8)
	var run []*backend.WorkRequest
	for i := range 8 {
		wr, release := backendtest.NewWR(t, regA, backend.OpWrite, backendtest.Slice(t, ha, i*64, 64), backendtest.Slice(t, hb, i*64, 64), time.Now().Add(tmo), rec)
		t.Cleanup(release)
		run = append(run, wr)
	}
	rt.copyRun(e, run)
	rt.cache.unref(e)
	for range run {
		if r := rec.Wait(t, tmo); !errors.Is(r.Err, rdmamgr.ErrRevoked) {
			t.Fatalf("copy through the stale mapping: %v, want ErrRevoked", r.Err)
		}
	}
	for i, c := range lb {
		if c != 0x55 {
			t.Fatalf("byte %d of the revoked region changed", i)
		}
	}
}
