//go:build linux

package shm_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/shm"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

const origin = 0x0123456789abcdef

// doOrigin posts op from the agent's local l to the owner's h carrying
// origin (0: none) and imm.
func doOrigin(t *testing.T, p *agentPair, op backend.Op, l, h buffer.Buffer, org uint64, imm uint32) error {
	t.Helper()
	wr, release := backendtest.NewWR(t, p.regA, op, l, h, time.Now().Add(timeout), nil)
	defer release()
	wr.Origin, wr.Imm, wr.HasImm = org, imm, op == backend.OpSend
	return backendtest.DoWR(t, timeout, p.route, wr)
}

// An origin on an event or a message is the Inbox's Peer only from the
// owner's own agent; from any other peer it is refused with
// ErrUnauthenticated (nothing delivered) and the route goes on.
func TestAgentOrigin(t *testing.T) {
	for _, agent := range []bool{true, false} {
		p := newAgentPair(t, agent, shm.Config{})
		in := backendtest.NewInbox(p.regO, 8, 8)
		t.Cleanup(in.Close)
		p.owner.SetInbox(in)
		h, _ := backendtest.Alloc(t, p.regO, 4096, buffer.AccessReadWrite|buffer.AccessNotify)
		l, _ := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
		rb, _ := backendtest.Alloc(t, p.regO, 4096, buffer.AccessReadWrite)
		rb2, _ := backendtest.Alloc(t, p.regO, 4096, buffer.AccessReadWrite)
		if err := in.Post(rb); err != nil {
			t.Fatal(err)
		}
		if err := in.Post(rb2); err != nil {
			t.Fatal(err)
		}

		err := doOrigin(t, p, backend.OpWriteImm, backendtest.Slice(t, l, 0, 64), backendtest.Slice(t, h, 0, 64), origin, 7)
		if agent {
			if err != nil {
				t.Fatalf("agent's PutWithImm with an origin: %v", err)
			}
			if ev := <-in.Events(); ev.Peer != origin || ev.Imm != 7 {
				t.Fatalf("event %+v, want Peer %x", ev, uint64(origin))
			}
		} else if !errors.Is(err, rdmamgr.ErrUnauthenticated) {
			t.Fatalf("non-agent's PutWithImm with an origin: %v, want ErrUnauthenticated", err)
		}

		err = doOrigin(t, p, backend.OpSend, backendtest.Slice(t, l, 0, 100), rb, origin, 9)
		if agent {
			if err != nil {
				t.Fatalf("agent's Send with an origin: %v", err)
			}
			if m := <-in.Messages(); m.Peer != origin || m.Imm != 9 || !m.HasImm || len(m.Mem) != 100 {
				t.Fatalf("message from %x imm %d/%v len %d, want Peer %x", m.Peer, m.Imm, m.HasImm, len(m.Mem), uint64(origin))
			}
		} else if !errors.Is(err, rdmamgr.ErrUnauthenticated) {
			t.Fatalf("non-agent's Send with an origin: %v, want ErrUnauthenticated", err)
		}

		// Without an origin: the route's own peer, and the route still works.
		if err := doOrigin(t, p, backend.OpWriteImm, backendtest.Slice(t, l, 0, 64), backendtest.Slice(t, h, 0, 64), 0, 8); err != nil {
			t.Fatalf("agent %v: PutWithImm: %v", agent, err)
		}
		if ev := <-in.Events(); ev.Peer != backendtest.OwnerA || ev.Imm != 8 {
			t.Fatalf("event %+v, want Peer %x", ev, uint64(backendtest.OwnerA))
		}
		if err := doOrigin(t, p, backend.OpSend, backendtest.Slice(t, l, 0, 10), rb, 0, 1); err != nil {
			t.Fatalf("agent %v: Send: %v", agent, err)
		}
		if m := <-in.Messages(); m.Peer != backendtest.OwnerA {
			t.Fatalf("message from %x", m.Peer)
		}
		if n := len(in.Events()) + len(in.Messages()); n != 0 {
			t.Fatalf("agent %v: %d more deliveries", agent, n)
		}
	}
}

// Notify delivers an event for bytes the agent wrote into a proxy, with
// the origin as its Peer; it refuses a region with no proxy open, and
// passes on the owner's refusal.
func TestAgentNotify(t *testing.T) {
	p := newAgentPair(t, true, shm.Config{})
	in := backendtest.NewInbox(p.regO, 8, 8)
	p.owner.SetInbox(in)
	h, _ := backendtest.Alloc(t, p.regO, 4096, buffer.AccessReadWrite|buffer.AccessNotify)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.proxy.Notify(ctx, h.Region, 0, 8, 1, origin); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("Notify without a proxy: %v", err)
	}
	ph, _ := p.mapProxy(t, h, buffer.AccessWrite|buffer.AccessNotify)
	ref, err := p.regA.AcquireRemote(ph.Region, ph.Key, 16, 8, buffer.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(ref.Bytes(), "landed!!")
	ref.Release()
	in.SetCheck(func(ev backend.Event) error {
		if got := string(ownerBytes(t, p.regO, h)[16:24]); got != "landed!!" {
			return errors.New("event before its bytes: " + got)
		}
		return nil
	})
	if err := p.proxy.Notify(ctx, h.Region, 16, 8, 42, origin); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	if ev := <-in.Events(); ev.Peer != origin || ev.Imm != 42 || ev.Region != h.Region || ev.Offset != 16 || ev.Length != 8 {
		t.Fatalf("event %+v", ev)
	}
	if err := p.proxy.Notify(ctx, h.Region, 4090, 8, 1, origin); !errors.Is(err, rdmamgr.ErrOutOfRange) {
		t.Fatalf("Notify out of range: %v", err)
	}
	in.StopEvents()
	if err := p.proxy.Notify(ctx, h.Region, 0, 8, 1, origin); !errors.Is(err, rdmamgr.ErrNoReceive) {
		t.Fatalf("Notify with nobody subscribed: %v", err)
	}
	releaseProxy(t, p.regA, ph)
}

// MapProxy runs the owner's checks: key, access, shareability; and the
// gate follows the region's lease.
func TestAgentMapProxyRefusals(t *testing.T) {
	p := newAgentPair(t, true, shm.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ro, _ := backendtest.Alloc(t, p.regO, 4096, buffer.AccessRead)
	if _, _, err := p.proxy.MapProxy(ctx, ro.Region, buffer.Key{1}, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrBadKey) {
		t.Fatalf("wrong key: %v", err)
	}
	if _, _, err := p.proxy.MapProxy(ctx, ro.Region, ro.Key, buffer.AccessWrite); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("write to a read-only region: %v", err)
	}
	// Mapped once for reading, a later proxy needing write is refused
	// from the cache's record of the region's access.
	ph, gate := p.mapProxy(t, ro, buffer.AccessRead)
	if gate.Access() != buffer.AccessRead {
		t.Fatalf("gate grants %v", gate.Access())
	}
	if _, _, err := p.proxy.MapProxy(ctx, ro.Region, ro.Key, buffer.AccessWrite); !errors.Is(err, rdmamgr.ErrAccess) {
		t.Fatalf("write to a read-only region, cached: %v", err)
	}
	releaseProxy(t, p.regA, ph)
	user := make([]byte, 4096)
	uh, err := p.regO.Register(user, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.proxy.MapProxy(ctx, uh.Region, uh.Key, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrNotSupported) {
		t.Fatalf("caller memory: %v", err)
	}

	leased, _ := backendtest.Alloc(t, p.regO, 4096, buffer.AccessReadWrite)
	lp, lg := p.mapProxy(t, leased, buffer.AccessRead)
	if err := lg.Enter(); err != nil {
		t.Fatalf("gate before the lease: %v", err)
	}
	lg.Leave()
	if err := p.regO.SetLease(leased, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := lg.Enter()
		if errors.Is(err, rdmamgr.ErrExpired) {
			break
		}
		if err == nil {
			lg.Leave()
		} else {
			t.Fatalf("gate after the lease: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the gate never saw the lease end")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := p.regA.AcquireRemote(lp.Region, lp.Key, 0, 8, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrExpired) {
		t.Fatalf("AcquireRemote of an expired proxy: %v", err)
	}
	releaseProxy(t, p.regA, lp)
}

// A route that ends with proxies open tells OnCut of each, its Close does
// not wait for them, and the proxies refuse (ErrPeerGone) until the agent
// releases them; their memory stays mapped until then.
func TestAgentRouteEndsUnderProxies(t *testing.T) {
	p := newAgentPair(t, true, shm.Config{})
	var mu sync.Mutex
	cut := map[uint64]int{}
	p.proxy.OnCut(func(region uint64) {
		mu.Lock()
		cut[region]++
		mu.Unlock()
	})
	h1, _ := backendtest.Alloc(t, p.regO, 4096, buffer.AccessReadWrite)
	h2, _ := backendtest.Alloc(t, p.regO, 1<<20, buffer.AccessReadWrite)
	ph1, g1 := p.mapProxy(t, h1, buffer.AccessWrite)
	ph2, _ := p.mapProxy(t, h2, buffer.AccessRead)
	held, err := p.regA.AcquireLocal(ph2)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { p.route.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(timeout):
		t.Fatal("route Close waits for the proxies")
	}
	mu.Lock()
	if cut[h1.Region] == 0 || cut[h2.Region] == 0 {
		t.Fatalf("OnCut at the route's end: %v", cut)
	}
	mu.Unlock()
	if err := g1.Enter(); !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("gate of a closed route: %v", err)
	}
	if _, err := p.regA.AcquireRemote(ph1.Region, ph1.Key, 0, 8, buffer.AccessWrite); !errors.Is(err, rdmamgr.ErrPeerGone) {
		t.Fatalf("AcquireRemote of a proxy of a closed route: %v", err)
	}
	_ = held.Bytes()[len(held.Bytes())-1] // still mapped: the Ref holds it
	held.Release()
	releaseProxy(t, p.regA, ph1)
	releaseProxy(t, p.regA, ph2)
	// The owner's region is free of the agent: Revoke returns at once.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := p.regO.Revoke(ctx, h1); err != nil {
		t.Fatal(err)
	}
}

// A proxied region is never evicted from the route's mappings (evicting
// would tell the owner to cut it under the agent's users).
func TestAgentProxyNotEvicted(t *testing.T) {
	p := newAgentPair(t, true, shm.Config{MaxMapped: 2})
	h, _ := backendtest.Alloc(t, p.regO, 4096, buffer.AccessReadWrite)
	ph, gate := p.mapProxy(t, h, buffer.AccessWrite)
	l, _ := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	for range 6 {
		o, _ := backendtest.Alloc(t, p.regO, 4096, buffer.AccessReadWrite)
		if err := backendtest.Do(t, timeout, p.route, p.regA, backend.OpWrite, l, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := gate.Enter(); err != nil {
		t.Fatalf("proxy after 6 other regions mapped (MaxMapped 2): %v", err)
	}
	gate.Leave()
	// The proxy's region still works through the route too.
	if err := backendtest.Do(t, timeout, p.route, p.regA, backend.OpWrite, l, h); err != nil {
		t.Fatal(err)
	}
	releaseProxy(t, p.regA, ph)
}
