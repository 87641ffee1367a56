package actor

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// leaseEnv is two managers in one system: a (the holder, with a queue
// pair to b) and b (the owner).
func leaseEnv(t *testing.T, cfgB Config) (a, b *Manager) {
	t.Helper()
	sys := NewActorSystem(nil)
	var err error
	a, err = New(sys, Config{Name: "lease-a"})
	if err != nil {
		t.Fatal(err)
	}
	cfgB.Name = "lease-b"
	b, err = New(sys, cfgB)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Manager{a, b} {
		if err := startTCP(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { a.Close(); b.Close(); sys.Shutdown() })
	return a, b
}

func TestRevokeBuffer(t *testing.T) {
	a, b := leaseEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner := NewClient(a.sys, b.PID())
	remote, err := owner.RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	local, err := a.Client().RequestBuffer(ctx, 4096, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := a.Client().RequestQueuePair(ctx, b.PID())
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Release()
	src, _ := a.Bytes(local)
	rand.Read(src)
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	dst, _ := b.Bytes(remote)
	want := bytes.Clone(dst)

	// Many puts in flight while the revocation lands: each either
	// completes before it or fails with ErrRevoked; none after it.
	var wrs []interface{ Wait(context.Context) error }
	for range 64 {
		wrs = append(wrs, qp.Put(ctx, local, remote))
	}
	if err := owner.RevokeBuffer(ctx, remote); err != nil {
		t.Fatal(err)
	}
	after := bytes.Clone(dst)
	for _, w := range wrs {
		if err := w.Wait(ctx); err != nil && !errors.Is(err, rdmamgr.ErrRevoked) {
			t.Fatalf("put racing a revocation: %v", err)
		}
	}
	rand.Read(src)
	if err := qp.Put(ctx, local, remote).Wait(ctx); !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Fatalf("put after revoke: %v, want ErrRevoked", err)
	}
	if err := qp.Get(ctx, local, remote).Wait(ctx); !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Fatalf("get after revoke: %v, want ErrRevoked", err)
	}
	if !bytes.Equal(dst, after) || !bytes.Equal(dst, want) {
		t.Fatal("owner memory changed after the revocation returned")
	}
	// The owner still uses its memory; renewal of a revoked buffer fails.
	if _, err := owner.RenewLease(ctx, remote, time.Second); !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Fatalf("renew after revoke: %v, want ErrRevoked", err)
	}
}

func TestLeaseExpiresAndRenews(t *testing.T) {
	a, b := leaseEnv(t, Config{ReapInterval: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner := NewClient(a.sys, b.PID())
	const lease = 300 * time.Millisecond
	remote, err := owner.RequestBuffer(ctx, 512, buffer.AccessReadWrite, WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	if remote.Lease != lease {
		t.Fatalf("handle lease %v, want %v", remote.Lease, lease)
	}
	local, err := a.Client().RequestBuffer(ctx, 512, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := a.Client().RequestQueuePair(ctx, b.PID())
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Release()
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil {
		t.Fatalf("put within the lease: %v", err)
	}
	// Renewing keeps it alive past the first lease.
	for range 3 {
		time.Sleep(lease / 3)
		if _, err := owner.RenewLease(ctx, remote, lease); err != nil {
			t.Fatalf("renew: %v", err)
		}
	}
	if err := qp.Get(ctx, local, remote).Wait(ctx); err != nil {
		t.Fatalf("get within the renewed lease: %v", err)
	}
	// Let it lapse: the owner's clock alone decides.
	dst, _ := b.Bytes(remote)
	want := bytes.Clone(dst)
	time.Sleep(lease + lease/2)
	if err := qp.Put(ctx, local, remote).Wait(ctx); !errors.Is(err, rdmamgr.ErrExpired) {
		t.Fatalf("put after the lease: %v, want ErrExpired", err)
	}
	if !bytes.Equal(dst, want) {
		t.Fatal("owner memory changed by a put after the lease")
	}
	if _, err := owner.RenewLease(ctx, remote, lease); !errors.Is(err, rdmamgr.ErrExpired) {
		t.Fatalf("renew after the lease: %v, want ErrExpired", err)
	}
}

func TestLeaseReaperReleases(t *testing.T) {
	a, b := leaseEnv(t, Config{ReapInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner := NewClient(a.sys, b.PID())
	if _, err := owner.RequestBuffer(ctx, 1<<20, buffer.AccessReadWrite, WithLease(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for b.reg.Stats().Regions != 0 {
		select {
		case <-ctx.Done():
			t.Fatal("expired buffer never released")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A queue pair whose requester gave up before the reply is released by the
// reaper, so its route does not stay up for ever.
func TestUnclaimedQueuePairReleased(t *testing.T) {
	a, b := leaseEnv(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := a.getRoute(ctx, b.PID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.newQueuePair(e) // built, never taken
	if err != nil {
		t.Fatal(err)
	}
	a.dropUnclaimed(time.Now().Add(-time.Hour)) // too young: kept
	qp, err := a.takeQueuePair(id)
	if err != nil {
		t.Fatalf("young unclaimed queue pair dropped: %v", err)
	}
	defer qp.Release()
	e2, err := a.getRoute(ctx, b.PID(), 0) // each queue pair holds one route reference
	if err != nil || e2 != e {
		t.Fatalf("second getRoute: %v (same route: %v)", err, e2 == e)
	}
	id2, err := a.newQueuePair(e2)
	if err != nil {
		t.Fatal(err)
	}
	a.dropUnclaimed(time.Now().Add(time.Hour)) // old enough
	if _, err := a.takeQueuePair(id2); err == nil {
		t.Fatal("unclaimed queue pair still there")
	}
	st, err := a.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Routes) != 1 || st.Routes[0].Refs != 1 {
		t.Fatalf("routes after dropping the unclaimed pair: %v", st.Routes)
	}
}
