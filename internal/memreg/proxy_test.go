package memreg

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// fakeGate is a proxy's gate: refuse makes Enter fail with it; it counts
// the users in and the Closes.
type fakeGate struct {
	refuse atomic.Pointer[error]
	in     atomic.Int64
	enters atomic.Int64
	closes atomic.Int64
	// inAtClose is the count of users when Close ran.
	inAtClose atomic.Int64
}

func (f *fakeGate) Enter() error {
	if p := f.refuse.Load(); p != nil {
		return *p
	}
	f.in.Add(1)
	f.enters.Add(1)
	return nil
}

func (f *fakeGate) Leave() {
	if f.in.Add(-1) < 0 {
		panic("fakeGate: Leave without Enter")
	}
}

func (f *fakeGate) Close() {
	f.inAtClose.Store(f.in.Load())
	f.closes.Add(1)
}

func (f *fakeGate) setRefuse(err error) { f.refuse.Store(&err) }

func mustProxy(t *testing.T, g *Registry, mem []byte, a buffer.Access, gate Gate) buffer.Buffer {
	t.Helper()
	b, err := g.RegisterProxy(mem, a, gate)
	if err != nil {
		t.Fatalf("RegisterProxy: %v", err)
	}
	return b
}

// The gate is entered by both acquires (after their own checks) and left
// by each Release; its refusal is returned as the bare sentinel by
// AcquireRemote (and wrapped by AcquireLocal) and leaks no reference.
func TestProxyGateEnterLeaveRefuse(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	mem := make([]byte, 4096)
	gate := &fakeGate{}
	h := mustProxy(t, g, mem, buffer.AccessReadWrite, gate)

	// Own checks first: a wrong key, bounds or access never reach the gate.
	if _, err := g.AcquireRemote(h.Region, buffer.Key{1}, 0, 8, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrBadKey) {
		t.Fatalf("bad key: %v", err)
	}
	if _, err := g.AcquireRemote(h.Region, h.Key, 4090, 8, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrOutOfRange) {
		t.Fatalf("out of range: %v", err)
	}
	if n := gate.enters.Load(); n != 0 {
		t.Fatalf("gate entered %d times by refused requests", n)
	}

	ref, err := g.AcquireRemote(h.Region, h.Key, 8, 8, buffer.AccessWrite)
	if err != nil {
		t.Fatalf("AcquireRemote: %v", err)
	}
	if &ref.Bytes()[0] != &mem[8] {
		t.Fatal("the proxy's Ref is not the proxied memory")
	}
	loc, err := g.AcquireLocal(h)
	if err != nil {
		t.Fatalf("AcquireLocal: %v", err)
	}
	if n := gate.in.Load(); n != 2 {
		t.Fatalf("gate holds %d users, want 2", n)
	}
	ref.Release()
	loc.Release()
	if n := gate.in.Load(); n != 0 {
		t.Fatalf("gate holds %d users after the Releases, want 0", n)
	}
	if err := g.RemoteErr(h2r(t, g, h)); err != nil {
		t.Fatalf("RemoteErr of an open proxy: %v", err)
	}

	for _, want := range []error{rdmamgr.ErrRevoked, rdmamgr.ErrReleased, rdmamgr.ErrExpired, rdmamgr.ErrPeerGone} {
		gate.setRefuse(want)
		if _, err := g.AcquireRemote(h.Region, h.Key, 0, 8, buffer.AccessRead); err != want {
			t.Fatalf("AcquireRemote through a gate refusing with %v: %v (want the bare sentinel)", want, err)
		}
		if _, err := g.AcquireLocal(h); !errors.Is(err, want) {
			t.Fatalf("AcquireLocal through a gate refusing with %v: %v", want, err)
		}
		if err := g.RemoteErr(h2r(t, g, h)); err != want {
			t.Fatalf("RemoteErr through a gate refusing with %v: %v", want, err)
		}
	}
	// No reference leaked by the refusals: Release does not wait.
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()
	if err := g.Release(ctx, h); err != nil {
		t.Fatalf("Release after refusals: %v", err)
	}
	if n := gate.closes.Load(); n != 1 {
		t.Fatalf("gate closed %d times, want 1", n)
	}
}

func h2r(t *testing.T, g *Registry, h buffer.Buffer) *Region {
	t.Helper()
	r, err := g.lookup(h)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Revoke and Release of a proxy wait for its Refs in flight (remote and
// local), cut it first, and close the gate only once no user is in.
func TestProxyRevokeReleaseWaitForRefs(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	var cuts atomic.Int64
	g.AddCutter(CutterFunc(func(*Region) { cuts.Add(1) }))
	gate := &fakeGate{}
	h := mustProxy(t, g, make([]byte, 1<<16), buffer.AccessReadWrite, gate)

	var refs [4]Ref
	for i := range refs {
		var err error
		if i%2 == 0 {
			refs[i], err = g.AcquireRemote(h.Region, h.Key, uint64(i)*64, 64, buffer.AccessRead)
		} else {
			refs[i], err = g.AcquireLocal(h)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	revoked := make(chan error, 1)
	go func() { revoked <- g.Revoke(context.Background(), h) }()
	// Revoke waits for the remote Refs: it has not returned while they are held.
	select {
	case err := <-revoked:
		t.Fatalf("Revoke returned (%v) with remote Refs held", err)
	case <-time.After(20 * time.Millisecond):
	}
	if cuts.Load() == 0 {
		t.Fatal("Revoke of a proxy did not cut it before waiting")
	}
	if _, err := g.AcquireRemote(h.Region, h.Key, 0, 8, buffer.AccessRead); !errors.Is(err, rdmamgr.ErrRevoked) {
		t.Fatalf("AcquireRemote of a revoked proxy: %v", err)
	}
	refs[0].Release()
	refs[2].Release()
	select {
	case err := <-revoked:
		if err != nil {
			t.Fatalf("Revoke: %v", err)
		}
	case <-time.After(liveness):
		t.Fatal("Revoke did not return once the remote Refs were released")
	}
	// The owner's own use goes on after Revoke; Release waits for it.
	released := make(chan error, 1)
	go func() { released <- g.Release(context.Background(), h) }()
	select {
	case err := <-released:
		t.Fatalf("Release returned (%v) with local Refs held", err)
	case <-time.After(20 * time.Millisecond):
	}
	if n := gate.closes.Load(); n != 0 {
		t.Fatal("gate closed while Refs are held")
	}
	refs[1].Release()
	refs[3].Release()
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
	case <-time.After(liveness):
		t.Fatal("Release did not return once the Refs were released")
	}
	if n, in := gate.closes.Load(), gate.inAtClose.Load(); n != 1 || in != 0 {
		t.Fatalf("gate closed %d times with %d users in, want once with none", n, in)
	}
}

// A proxy is never exported, never in the registration cache, never
// pooled; it counts against the limits like any registration.
func TestProxyNotShareable(t *testing.T) {
	g := newReg(t, buffer.Limits{MaxRegions: 2})
	mem := make([]byte, 8192)
	gate := &fakeGate{}
	h := mustProxy(t, g, mem, buffer.AccessReadWrite, gate)
	r := h2r(t, g, h)
	if r.Kind() != KindProxy || r.Slab() != nil {
		t.Fatalf("kind %d slab %v", r.Kind(), r.Slab())
	}
	if _, _, ok := r.Memfd(); ok {
		t.Fatal("a proxy has a memfd")
	}
	ref, err := g.AcquireRemote(h.Region, h.Key, 0, 8, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	if fd, _, err := ref.ExportFD(g); err == nil || fd >= 0 {
		t.Fatalf("ExportFD of a proxy: fd %d, %v", fd, err)
	}
	ref.Release()
	// Registering the same memory makes a registration of its own, and a
	// second proxy of it does too.
	u, err := g.Register(mem, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if u.Region == h.Region {
		t.Fatal("Register of a proxy's memory returned the proxy")
	}
	if _, err := g.RegisterProxy(mem, buffer.AccessRead, &fakeGate{}); !errors.Is(err, rdmamgr.ErrLimit) {
		t.Fatalf("proxy past MaxRegions: %v", err)
	}
	if _, err := g.RegisterProxy(mem, buffer.AccessRead, nil); !errors.Is(err, rdmamgr.ErrInvalid) {
		t.Fatalf("proxy without a gate: %v", err)
	}
	if _, err := g.RegisterProxy(nil, buffer.AccessRead, gate); !errors.Is(err, rdmamgr.ErrInvalid) {
		t.Fatalf("empty proxy: %v", err)
	}
}

// Many acquirers against a Revoke racing them: the gate's count always
// returns to zero and Revoke returns only once every admitted Ref is gone.
func TestProxyConcurrentRevoke(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	gate := &fakeGate{}
	h := mustProxy(t, g, make([]byte, 4096), buffer.AccessReadWrite, gate)
	var held atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ref, err := g.AcquireRemote(h.Region, h.Key, 0, 64, buffer.AccessWrite)
				if err != nil {
					continue
				}
				held.Add(1)
				ref.Bytes()[i]++ // a byte of its own: acquirers race only the Revoke
				held.Add(-1)
				ref.Release()
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()
	if err := g.Revoke(ctx, h); err != nil {
		t.Fatal(err)
	}
	if n := held.Load(); n != 0 {
		t.Fatalf("%d remote Refs held after Revoke returned", n)
	}
	close(stop)
	wg.Wait()
	if n := gate.in.Load(); n != 0 {
		t.Fatalf("gate holds %d users", n)
	}
}
