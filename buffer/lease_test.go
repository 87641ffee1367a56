package buffer

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLeaseOnOwnersClock(t *testing.T) {
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 64, AccessReadWrite)
	if err := g.SetLease(b, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	r, _, err := g.Acquire(b.Region, b.Key, 0, 64, AccessWrite)
	if err != nil {
		t.Fatalf("within the lease: %v", err)
	}
	r.UnrefRemote()
	if left, ok := g.LeaseLeft(r); !ok || left <= 0 || left > 50*time.Millisecond {
		t.Fatalf("LeaseLeft = %v, %v", left, ok)
	}
	time.Sleep(80 * time.Millisecond)
	if _, _, err := g.Acquire(b.Region, b.Key, 0, 64, AccessRead); !errors.Is(err, ErrExpired) {
		t.Fatalf("after the lease: %v, want ErrExpired", err)
	}
	// The owner's own use is not leased.
	if _, err := g.Bytes(b); err != nil {
		t.Fatalf("owner use after the lease: %v", err)
	}
	if got := g.Expired(); len(got) != 1 || got[0].ID() != b.Region {
		t.Fatalf("Expired() = %v", got)
	}
	if err := g.SetLease(b, time.Second); !errors.Is(err, ErrExpired) {
		t.Fatalf("renew after expiry: %v, want ErrExpired", err)
	}
}

func TestLeaseRenewAndClear(t *testing.T) {
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 64, AccessRead)
	for range 3 {
		if err := g.SetLease(b, 40*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := g.SetLease(b, 0); err != nil { // no lease any more
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if r, _, err := g.Acquire(b.Region, b.Key, 0, 1, AccessRead); err != nil {
		t.Fatalf("lease cleared: %v", err)
	} else {
		r.UnrefRemote()
	}
	bad := b
	bad.Key[0] ^= 1
	if err := g.SetLease(bad, time.Second); !errors.Is(err, ErrBadKey) {
		t.Fatalf("lease with a wrong key: %v", err)
	}
}

// Revoke returns only once admitted remote requests are done; later ones
// fail with ErrRevoked; the owner keeps its memory.
func TestRevokeWaitsForRemote(t *testing.T) {
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 64, AccessReadWrite)
	r, _, err := g.Acquire(b.Region, b.Key, 0, 8, AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Revoke(context.Background(), b) }()
	// New remote requests fail at once, even before Revoke returns.
	for {
		r2, _, err := g.Acquire(b.Region, b.Key, 0, 8, AccessRead)
		if errors.Is(err, ErrRevoked) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		r2.UnrefRemote() // admitted before the revocation: done at once
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Revoke returned (%v) while a remote request was admitted", err)
	default:
	}
	r.UnrefRemote()
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
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 64, AccessReadWrite)
	r, _, err := g.Acquire(b.Region, b.Key, 0, 8, AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	defer r.UnrefRemote()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.Revoke(ctx, b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Revoke with a request held: %v, want DeadlineExceeded", err)
	}
	if _, _, err := g.Acquire(b.Region, b.Key, 0, 8, AccessRead); !errors.Is(err, ErrRevoked) {
		t.Fatalf("after a timed-out Revoke: %v, want ErrRevoked (it still holds)", err)
	}
}
