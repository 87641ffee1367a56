//go:build ibverbs

package ibverbs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
)

// The invalidation protocol on a route shared by several processes: a
// revoke at the far end fails no neighbour's operation.

// testVia2 is the slot of the second fake process at the far agent.
const testVia2 = 8

// multiAgent dispatches a resolver's calls to the fake process at via.
type multiAgent map[uint16]*fakeAgent

func (m multiAgent) Resolve(ctx context.Context, via uint16, region uint64, key buffer.Key, need buffer.Access) (uint64, buffer.Key, error) {
	f := m[via]
	if f == nil {
		return 0, buffer.Key{}, fmt.Errorf("no process at slot %d: %w", via, rdmamgr.ErrPeerGone)
	}
	return f.Resolve(ctx, via, region, key, need)
}

func (m multiAgent) Inbox(via uint16) (backend.Inbox, error) {
	f := m[via]
	if f == nil {
		return nil, fmt.Errorf("no process at slot %d: %w", via, rdmamgr.ErrPeerGone)
	}
	return f.Inbox(via)
}

// TestViaRevokeSharedRoute: process Y (via 8) keeps Puts and Gets in
// flight on the agents' route while process X (via 7) revokes its region
// at the far end (the far agent revokes its proxy); X's own operations
// are in flight too. The far agent invalidates the proxy on the route
// and waits for the initiator, which lets X's operations on the rkey end
// before it acks: every Y operation succeeds with its bytes checked, the
// route survives, each X operation either succeeded or failed with
// ErrRevoked (none met the dead rkey), X's next operation fails with
// ErrRevoked, and Y goes on on the same route. On the old code the first
// X operation after the deregistration met a remote access error
// (ErrStaleProxy) and took the route, and Y's operations, with it.
func TestViaRevokeSharedRoute(t *testing.T) {
	requireDevices(t)
	a, regA := started(t, DefaultConfig(), backendtest.OwnerA)
	b, regB := started(t, DefaultConfig(), backendtest.OwnerB)
	newFakeAgent(t, a, testVia)
	fx := newFakeAgent(t, b, testVia)
	fy := newFakeAgent(t, b, testVia2)
	if !wiring.SetResolver(b, multiAgent{testVia: fx, testVia2: fy}) {
		t.Fatal("SetResolver")
	}
	rt := connect(t, a, b).(*route)
	p := &agentPair{a: a, b: b, regA: regA, regB: regB, rt: rt}

	const size = 64 << 10
	hX, _ := fx.region(t, size, accessAll)
	hY, memY := fy.region(t, size, accessAll)
	withVia := func(v uint16) func(*backend.WorkRequest) {
		return func(wr *backend.WorkRequest) { wr.Via = v }
	}
	hA, _ := backendtest.Alloc(t, regA, size, buffer.AccessReadWrite)
	if err := p.viaDo(t, rt, backend.OpWrite, hA, hX, nil); err != nil {
		t.Fatalf("put via X: %v", err)
	}

	// The give-up must not end the test's wait for its own hold below.
	defer func(d time.Duration) { invalidateWait = d }(invalidateWait)
	invalidateWait = waitTimeout

	revoked := make(chan struct{})
	var wg sync.WaitGroup
	const workers = 4
	yErr := make([]error, workers)
	xErr := make([]error, workers)
	yOps := make([]int, workers)
	var xOps atomic.Int64
	for w := range workers {
		// Y: Puts then Gets of its own quarter, every byte checked,
		// until a few rounds after the revoke.
		wg.Add(2)
		go func() {
			defer wg.Done()
			q := size / workers
			hL, la := backendtest.Alloc(t, regA, 2*q, buffer.AccessReadWrite)
			put, get := backendtest.Slice(t, hL, 0, q), backendtest.Slice(t, hL, q, q)
			dst := backendtest.Slice(t, hY, w*q, q)
			after := 0
			for after < 20 {
				select {
				case <-revoked:
					after++
				default:
				}
				backendtest.Random(t, la[:q])
				if err := p.viaDo(t, rt, backend.OpWrite, put, dst, withVia(testVia2)); err != nil {
					yErr[w] = fmt.Errorf("put %d: %w", yOps[w], err)
					return
				}
				if !bytesEqual(memY[w*q:(w+1)*q], la[:q]) {
					yErr[w] = fmt.Errorf("put %d: the process's bytes differ", yOps[w])
					return
				}
				if err := p.viaDo(t, rt, backend.OpRead, get, dst, withVia(testVia2)); err != nil {
					yErr[w] = fmt.Errorf("get %d: %w", yOps[w], err)
					return
				}
				if !bytesEqual(la[q:], memY[w*q:(w+1)*q]) {
					yErr[w] = fmt.Errorf("get %d: the bytes differ", yOps[w])
					return
				}
				yOps[w]++
			}
		}()
		// X: Puts to its region until one is refused.
		go func() {
			defer wg.Done()
			hL, _ := backendtest.Alloc(t, regA, 8192, buffer.AccessReadWrite)
			for {
				err := p.viaDo(t, rt, backend.OpWrite, hL, backendtest.Slice(t, hX, w*8192, 8192), nil)
				if err != nil {
					xErr[w] = err
					return
				}
				xOps.Add(1)
			}
		}()
	}
	// Both under way: a few X Puts done (Y runs as long).
	for limit := time.Now().Add(waitTimeout); xOps.Load() < 3*workers; {
		if time.Now().After(limit) {
			t.Fatalf("X made %d puts", xOps.Load())
		}
		time.Sleep(time.Millisecond)
	}

	// One more operation on X's rkey that has not ended (held as a post
	// holds it): the far agent's revoke waits for it, the proxy's memory
	// region stays registered meanwhile.
	k := viaKey{via: testVia, region: hX.Region, key: hX.Key}
	rt.viaMu.Lock()
	e := rt.viaCache[k]
	if e != nil {
		e.users++
	}
	rt.viaMu.Unlock()
	if e == nil {
		t.Fatal("X's resolution is not cached")
	}
	fx.mu.Lock()
	proxy, g := fx.proxies[hX.Region], fx.gates[hX.Region]
	fx.cuts[hX.Region] = rdmamgr.ErrRevoked
	delete(fx.proxies, hX.Region)
	fx.mu.Unlock()
	g.cut.Store(true)
	cutErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		cutErr <- fx.agent.Revoke(ctx, proxy)
	}()
	for dead := false; !dead; {
		rt.viaMu.Lock()
		dead = e.dead != 0
		rt.viaMu.Unlock()
		if !dead {
			time.Sleep(time.Millisecond)
		}
	}
	select {
	case err := <-cutErr:
		t.Fatalf("the revoke returned (%v) while an operation held the proxy's rkey", err)
	default:
	}
	if n := g.users.Load(); n != 1 {
		t.Fatalf("the proxy's gate has %d users while the invalidate waits, want 1 (its memory region)", n)
	}
	rt.viaRelease(e) // the operation ends: the initiator acks
	if err := <-cutErr; err != nil {
		t.Fatalf("revoke the proxy: %v", err)
	}
	if n := g.users.Load(); n != 0 {
		t.Fatalf("the proxy's gate has %d users after its revoke", n)
	}
	close(revoked)
	wg.Wait()

	for w := range workers {
		if yErr[w] != nil {
			t.Errorf("Y worker %d (after %d rounds): %v", w, yOps[w], yErr[w])
		}
		if !errors.Is(xErr[w], rdmamgr.ErrRevoked) || errors.Is(xErr[w], agentapi.ErrStaleProxy) {
			t.Errorf("X worker %d ended with %v, want ErrRevoked (not a stale proxy)", w, xErr[w])
		}
	}
	if err := rt.Err(); err != nil {
		t.Fatalf("the shared route failed: %v", err)
	}
	if err := p.viaDo(t, rt, backend.OpRead, hA, hX, nil); !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Fatalf("X's get after the revoke: %v, want ErrRevoked", err)
	}
	if err := p.viaDo(t, rt, backend.OpWrite, backendtest.Slice(t, hA, 0, 4096), backendtest.Slice(t, hY, 0, 4096), withVia(testVia2)); err != nil {
		t.Fatalf("Y's put after the revoke: %v", err)
	}
	if n, g := b.invalidations.Load(), b.invalGiveUps.Load(); n != 1 || g != 0 {
		t.Errorf("%d invalidations, %d give-ups; want 1, 0", n, g)
	}
	if n := a.invalHeld.Load(); n != 1 {
		t.Errorf("%d invalidates waited for operations on the rkey, want 1", n)
	}
	t.Logf("Y: %v rounds (the last 20 after the revoke), X: %d puts", yOps, xOps.Load())
	if err := rt.Err(); err != nil {
		t.Fatalf("the shared route failed: %v", err)
	}
}

// TestViaReleaseInvalidates: a proxy released (not revoked) at the far
// end is invalidated the same way: the route goes on and the next
// operation gets the far Resolver's answer.
func TestViaReleaseInvalidates(t *testing.T) {
	p := newAgentPair(t, DefaultConfig())
	hP, _ := p.fake.region(t, 4096, accessAll)
	hA, _ := backendtest.Alloc(t, p.regA, 4096, buffer.AccessReadWrite)
	if err := p.viaDo(t, p.rt, backend.OpWrite, hA, hP, nil); err != nil {
		t.Fatalf("put via: %v", err)
	}
	p.fake.mu.Lock()
	proxy := p.fake.proxies[hP.Region]
	delete(p.fake.proxies, hP.Region)
	delete(p.fake.handles, hP.Region)
	p.fake.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := p.fake.agent.Release(ctx, proxy); err != nil {
		t.Fatalf("release the proxy: %v", err)
	}
	if err := p.viaDo(t, p.rt, backend.OpWrite, hA, hP, nil); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("put via a released proxy: %v, want ErrReleased", err)
	}
	if err := p.rt.Err(); err != nil {
		t.Fatalf("the route failed: %v", err)
	}
	if n, g := p.b.invalidations.Load(), p.b.invalGiveUps.Load(); n != 1 || g != 0 {
		t.Errorf("%d invalidations, %d give-ups; want 1, 0", n, g)
	}
}
