package memreg

import (
	"context"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

func mustRegister(t testing.TB, g *Registry, p []byte, a buffer.Access) buffer.Buffer {
	t.Helper()
	b, err := g.Register(p, a)
	if err != nil {
		t.Fatalf("Register(%d bytes, %v): %v", len(p), a, err)
	}
	return b
}

// TestCacheHit checks that registering the same memory again returns the
// same handle, registers nothing more, and that the registration lives
// until its last holder releases it.
func TestCacheHit(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	h := &recHooks{t: t}
	g.AddHooks(h)
	p := make([]byte, 4096)
	a := mustRegister(t, g, p, buffer.AccessReadWrite)
	b := mustRegister(t, g, p, buffer.AccessReadWrite)
	if a != b {
		t.Fatalf("second Register of the same memory: %v, want %v", b, a)
	}
	if st := g.Stats(); st.CacheHits != 1 || st.CacheMisses != 1 || st.Regions != 1 || st.Bytes != 4096 || st.CacheEntries != 1 {
		t.Fatalf("Stats %+v", st)
	}
	if len(h.log) != 1 {
		t.Fatalf("hooks ran %v, want one registration", h.log)
	}
	if err := g.Release(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	ref, err := g.AcquireRemote(b.Region, b.Key, 0, 4096, buffer.AccessWrite)
	if err != nil {
		t.Fatalf("registration gone while a holder remains: %v", err)
	}
	ref.Release()
	if err := g.Release(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	_, err = g.AcquireRemote(b.Region, b.Key, 0, 1, buffer.AccessWrite)
	wantErr(t, "AcquireRemote after the last Release", err, rdmamgr.ErrReleased)
	wantErr(t, "third Release", g.Release(context.Background(), b), rdmamgr.ErrReleased)
	if st := g.Stats(); !idle(st) || st.CacheEntries != 0 || len(h.reg) != 0 {
		t.Fatalf("after the last Release: %+v, hooks %v", st, h.log)
	}
}

// TestCacheMiss checks what is not the same registration: another
// length, another start, another access.
func TestCacheMiss(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	p := make([]byte, 4096)
	ids := map[uint64]bool{}
	for _, c := range []struct {
		p []byte
		a buffer.Access
	}{{p, buffer.AccessRead}, {p[:100], buffer.AccessRead}, {p[1:], buffer.AccessRead}, {p, buffer.AccessReadWrite}} {
		ids[mustRegister(t, g, c.p, c.a).Region] = true
	}
	if st := g.Stats(); len(ids) != 4 || st.CacheHits != 0 || st.CacheMisses != 4 || st.Regions != 4 {
		t.Fatalf("%d regions, Stats %+v", len(ids), st)
	}
}

// TestCacheInvalidation checks that released, revoked and leased
// registrations are never handed out again.
func TestCacheInvalidation(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	p := make([]byte, 512)
	a := mustRegister(t, g, p, buffer.AccessRead)
	if err := g.Release(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	b := mustRegister(t, g, p, buffer.AccessRead)
	if b.Region == a.Region || b.Key == a.Key {
		t.Fatalf("released registration handed out again")
	}
	if err := g.Revoke(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	c := mustRegister(t, g, p, buffer.AccessRead)
	if c.Region == b.Region {
		t.Fatalf("revoked registration handed out again")
	}
	if err := g.SetLease(c, liveness); err != nil {
		t.Fatal(err)
	}
	d := mustRegister(t, g, p, buffer.AccessRead)
	if d.Region == c.Region {
		t.Fatalf("leased registration handed out again")
	}
	if st := g.Stats(); st.CacheHits != 0 || st.CacheMisses != 4 || st.Regions != 3 {
		t.Fatalf("Stats %+v", st)
	}
}

// TestCacheBound checks that the cache indexes at most its bound, least
// recently used forgotten first, and that a forgotten registration stays
// registered for its holder.
func TestCacheBound(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	g.setCacheMax(2)
	ps := [][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64)}
	b0 := mustRegister(t, g, ps[0], buffer.AccessRead)
	b1 := mustRegister(t, g, ps[1], buffer.AccessRead)
	if mustRegister(t, g, ps[0], buffer.AccessRead) != b0 { // p0 most recently used
		t.Fatal("miss on a cached registration")
	}
	mustRegister(t, g, ps[2], buffer.AccessRead) // forgets p1
	if st := g.Stats(); st.CacheEntries != 2 {
		t.Fatalf("%d entries, bound 2", st.CacheEntries)
	}
	if mustRegister(t, g, ps[0], buffer.AccessRead) != b0 {
		t.Fatal("recently used registration forgotten")
	}
	if again := mustRegister(t, g, ps[1], buffer.AccessRead); again.Region == b1.Region {
		t.Fatal("forgotten registration handed out")
	}
	ref, err := g.AcquireLocal(b1)
	if err != nil {
		t.Fatalf("forgotten registration no longer registered: %v", err)
	}
	ref.Release()
}

// TestCacheExpiredLease checks that a lease that ran out ends a shared
// registration for all its holders at the next Release (the reaper's).
func TestCacheExpiredLease(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	p := make([]byte, 64)
	a := mustRegister(t, g, p, buffer.AccessRead)
	mustRegister(t, g, p, buffer.AccessRead)
	if err := g.SetLease(a, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	eventually(t, "lease ran out", func() bool { return len(g.Expired()) == 1 })
	if err := g.Release(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	_, err := g.AcquireLocal(a)
	wantErr(t, "AcquireLocal after the expired registration's Release", err, rdmamgr.ErrReleased)
	wantErr(t, "the other holder's Release", g.Release(context.Background(), a), rdmamgr.ErrReleased)
	if st := g.Stats(); !idle(st) {
		t.Fatalf("Stats %+v", st)
	}
}
