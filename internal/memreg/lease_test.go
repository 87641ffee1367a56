package memreg

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/coarseclock"
)

func TestLeaseOnOwnersClock(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 64, buffer.AccessReadWrite)
	if err := g.SetLease(b, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ref, err := g.AcquireRemote(b.Region, b.Key, 0, 64, buffer.AccessWrite)
	if err != nil {
		t.Fatalf("within the lease: %v", err)
	}
	r := ref.Region()
	ref.Release()
	if left, ok := g.LeaseLeft(r); !ok || left <= 0 || left > 50*time.Millisecond {
		t.Fatalf("LeaseLeft = %v, %v", left, ok)
	}
	time.Sleep(80 * time.Millisecond)
	if _, err := g.AcquireRemote(b.Region, b.Key, 0, 64, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrExpired) {
		t.Fatalf("after the lease: %v, want rdmamgr.ErrExpired", err)
	}
	// The owner's own use is not leased.
	if _, err := g.Bytes(b); err != nil {
		t.Fatalf("owner use after the lease: %v", err)
	}
	if got := g.Expired(); len(got) != 1 || got[0].ID() != b.Region {
		t.Fatalf("Expired() = %v", got)
	}
	if err := g.SetLease(b, time.Second); !errors.Is(err, rdmamgr.ErrExpired) {
		t.Fatalf("renew after expiry: %v, want rdmamgr.ErrExpired", err)
	}
}

func TestLeaseRenewAndClear(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 64, buffer.AccessRead)
	// Three renewals of a 300 ms lease 150 ms apart outlive the first
	// lease only if each renewal extends it; the 150 ms margin absorbs a
	// loaded machine's oversleeping.
	for range 3 {
		if err := g.SetLease(b, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	if err := g.SetLease(b, 0); err != nil { // no lease any more
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if ref, err := g.AcquireRemote(b.Region, b.Key, 0, 1, buffer.AccessRead); err != nil {
		t.Fatalf("lease cleared: %v", err)
	} else {
		ref.Release()
	}
	bad := b
	bad.Key[0] ^= 1
	if err := g.SetLease(bad, time.Second); !errors.Is(err, rdmamgr.ErrBadKey) {
		t.Fatalf("lease with a wrong key: %v", err)
	}
}

// Revoke returns only once admitted remote requests are done; later ones
// fail with rdmamgr.ErrRevoked; the owner keeps its memory.
func TestRevokeWaitsForRemote(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 64, buffer.AccessReadWrite)
	ref, err := g.AcquireRemote(b.Region, b.Key, 0, 8, buffer.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	r := ref.Region()
	done := make(chan error, 1)
	go func() { done <- g.Revoke(context.Background(), b) }()
	// New remote requests fail at once, even before Revoke returns.
	for {
		ref2, err := g.AcquireRemote(b.Region, b.Key, 0, 8, buffer.AccessRead)
		if errors.Is(err, rdmamgr.ErrRevoked) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ref2.Release() // admitted before the revocation: done at once
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Revoke returned (%v) while a remote request was admitted", err)
	default:
	}
	ref.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := g.Bytes(b); err != nil {
		t.Fatalf("owner use after revoke: %v", err)
	}
	if !r.Revoked() {
		t.Fatal("region not marked revoked")
	}
}

func TestRevokeContextEnds(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 64, buffer.AccessReadWrite)
	ref, err := g.AcquireRemote(b.Region, b.Key, 0, 8, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.Revoke(ctx, b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Revoke with a request held: %v, want DeadlineExceeded", err)
	}
	if _, err := g.AcquireRemote(b.Region, b.Key, 0, 8, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Fatalf("after a timed-out Revoke: %v, want rdmamgr.ErrRevoked (it still holds)", err)
	}
}

// TestLeaseEndsOnTime: the remote checks read the coarse clock far from a
// lease's end and the real one near it (expiredAt takes the coarse
// reading, so every case is exact here): a coarse reading past the end
// is an end, one more than leaseExact before it is live without a look
// at the real clock, and within leaseExact the real clock decides, either
// way. With the real coarse clock, a lease far from its end either way
// is judged right.
func TestLeaseEndsOnTime(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	ms := int64(time.Millisecond)
	now := g.now()
	for _, tc := range []struct {
		what  string
		l, c  int64 // the lease's end and the coarse reading
		ended bool
	}{
		{"coarse past the end", now - ms, now - ms/2, true},
		{"coarse well before the end, real past it", now - ms, now - ms - 2*int64(leaseExact), false},
		{"coarse near the end, real past it", now - ms, now - 2*ms, true},
		{"coarse near the end, real well before it", now + int64(time.Hour), now + int64(time.Hour) - ms, false},
		{"coarse and real well before the end", now + int64(time.Hour), now, false},
	} {
		if got := g.expiredAt(tc.l, tc.c); got != tc.ended {
			t.Errorf("%s: ended %v, want %v", tc.what, got, tc.ended)
		}
	}
	coarseclock.Mono() // the ticker runs (the registry holds the clock)
	if g.expired(g.now() + int64(time.Hour)) {
		t.Error("a lease an hour from its end was taken as over")
	}
	if !g.expired(g.now() - int64(time.Hour)) {
		t.Error("a lease that ended an hour ago was taken as live")
	}
	if g.expired(0) {
		t.Error("no lease was taken as over")
	}
}
