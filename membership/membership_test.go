package membership

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/etcdtest"
)

// startEtcd runs a one-node etcd on loopback for the test.
func startEtcd(t *testing.T) string { return etcdtest.Start(t) }

func TestRegisterLookupWatch(t *testing.T) {
	ep := startEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var r *Registry
	for {
		var err error
		if r, err = Open(Config{Endpoints: []string{ep}, Cluster: "t", TTL: 2 * time.Second, DialTimeout: time.Second}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer r.Close()

	events := make(chan Event, 16)
	wctx, stop := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- r.Watch(wctx, func(e Event) { events <- e }) }()
	time.Sleep(200 * time.Millisecond) // let the watch start

	a := Member{Name: "a", Address: "10.212.0.1:7000", Manager: "rdma-manager"}
	ga, err := r.Register(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Lookup(ctx, "a")
	if err != nil || got != a {
		t.Fatalf("Lookup = %+v, %v", got, err)
	}
	if _, err := r.Lookup(ctx, "b"); !errors.Is(err, rdmamgr.ErrUnknownPeer) {
		t.Fatalf("Lookup(b) = %v", err)
	}
	if e := next(t, events); e.Left || e.Member != a {
		t.Fatalf("event %+v, want a joined", e)
	}

	// Registered again at a new address (a restart): the old one leaves.
	a2 := a
	a2.Address = "10.212.0.1:7001"
	ga2, err := r.Register(ctx, a2)
	if err != nil {
		t.Fatal(err)
	}
	if e := next(t, events); !e.Left || e.Member != a {
		t.Fatalf("event %+v, want the old address to leave", e)
	}
	if e := next(t, events); e.Left || e.Member != a2 {
		t.Fatalf("event %+v, want the new address", e)
	}
	ms, err := r.List(ctx)
	if err != nil || len(ms) != 1 || ms[0] != a2 {
		t.Fatalf("List = %+v, %v", ms, err)
	}
	// The first registration's lease no longer holds the name.
	if err := ga.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lookup(ctx, "a"); err != nil {
		t.Fatalf("name lost with the old lease: %v", err)
	}
	// Leaving revokes the lease: the member is gone at once.
	if err := ga2.Close(); err != nil {
		t.Fatal(err)
	}
	if e := next(t, events); !e.Left || e.Member != a2 {
		t.Fatalf("event %+v, want a to leave", e)
	}
	stop()
	if err := <-watched; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v", err)
	}
}

func next(t *testing.T, ch <-chan Event) Event {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no membership event in 10 s")
		return Event{}
	}
}
