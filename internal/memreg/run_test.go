package memreg

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// A LocalRun resolves a chain of handles as AcquireLocalOf does, the same
// checks on its fast path (key, bounds, owner), takes the references to a
// region in one go and gives back the spare ones at Close; ReleaseAll
// drops them all. Afterwards the region holds no reference and releases.
func TestLocalRun(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	a := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	b := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	ra, rb := g.regionOf(t, a), g.regionOf(t, b)
	slice := func(h buffer.Buffer, off, n uint64) *buffer.Buffer { return mustSlice(t, h, off, n) }
	lr := g.NewLocalRun(nil)
	var refs []Ref
	take := func(h *buffer.Buffer, want int64) {
		t.Helper()
		ref, err := lr.Acquire(h, want)
		if err != nil {
			t.Fatalf("Acquire(%v, %d): %v", *h, want, err)
		}
		if &ref.Bytes()[0] != &ref.Region().mem[h.Offset] || uint64(len(ref.Bytes())) != h.Length {
			t.Fatalf("Acquire(%v) gave the wrong bytes", *h)
		}
		refs = append(refs, ref)
	}
	take(slice(a, 0, 8), 4)
	if got := ra.Refs(); got != 4 {
		t.Fatalf("a holds %d references after the first of a chain of 4, want 4 (taken at once)", got)
	}
	var next Ref
	if mem, ok := lr.Next(slice(a, 8, 8), &next); !ok || next.Region() != ra || len(next.Bytes()) != 8 || &next.Bytes()[0] != &ra.mem[8] ||
		len(mem) != 8 || cap(mem) != 8 || &mem[0] != &ra.mem[8] {
		t.Fatal("Next on the last region with references spare did not resolve it, or returned other bytes than its Ref's")
	}
	refs = append(refs, next)
	wrongKey := *slice(a, 16, 8)
	wrongKey.Key[1] ^= 1
	wrongKeyHigh := *slice(a, 16, 8)
	wrongKeyHigh.Key[buffer.KeySize-1] ^= 0x80
	pastEnd := *slice(a, 4088, 8)
	pastEnd.Offset += 8
	tooLong := *slice(a, 4088, 8)
	tooLong.Length = 1<<64 - 1 // off+n wraps: refused without overflowing
	otherOwner := *slice(a, 16, 8)
	otherOwner.OwnerID ^= 1
	for _, h := range []*buffer.Buffer{&wrongKey, &wrongKeyHigh, slice(b, 0, 8), &pastEnd, &tooLong, &otherOwner} {
		var miss Ref
		if _, ok := lr.Next(h, &miss); ok || miss.Held() {
			t.Fatalf("Next resolved %v (a wrong key, another region, out of range or another owner's)", *h)
		}
	}
	if got := ra.Refs(); got != 4 {
		t.Fatalf("a holds %d references after Next's refusals, want 4 (none taken or dropped)", got)
	}
	badKey := *slice(a, 16, 8)
	badKey.Key[0] ^= 1
	if _, err := lr.Acquire(&badKey, 2); !errors.Is(err, rdmamgr.ErrBadKey) {
		t.Fatalf("Acquire with a wrong key: %v, want ErrBadKey", err)
	}
	past := *slice(a, 4088, 8)
	past.Offset += 8
	if _, err := lr.Acquire(&past, 2); !errors.Is(err, rdmamgr.ErrOutOfRange) {
		t.Fatalf("Acquire past the end: %v, want ErrOutOfRange", err)
	}
	other := *slice(a, 0, 8)
	other.OwnerID ^= 1
	if _, err := lr.Acquire(&other, 2); !errors.Is(err, rdmamgr.ErrInvalid) {
		t.Fatalf("Acquire of another owner's handle: %v, want ErrInvalid", err)
	}
	if _, ok := lr.Next(slice(a, 16, 8), &next); ok {
		t.Fatal("Next with no reference spare resolved a handle")
	}
	if got := ra.Refs(); got != 2 {
		t.Fatalf("a holds %d references after the refusals, want 2 (the spare ones given back)", got)
	}
	take(slice(a, 16, 8), 2)
	take(slice(b, 0, 8), 2)
	take(slice(b, 8, 8), 1)
	take(slice(a, 24, 8), 1)
	lr.Close()
	if ga, gb := ra.Refs(), rb.Refs(); ga != 4 || gb != 2 {
		t.Fatalf("after Close a holds %d, b %d references, want 4 and 2 (one per Ref)", ga, gb)
	}
	ReleaseAll(refs)
	for i, ref := range refs {
		if ref.Held() {
			t.Fatalf("ref %d still held after ReleaseAll", i)
		}
	}
	if ga, gb := ra.Refs(), rb.Refs(); ga != 0 || gb != 0 {
		t.Fatalf("after ReleaseAll a holds %d, b %d references, want 0", ga, gb)
	}
	// A released region: its run's fast path refuses, as AcquireLocalOf.
	lr = g.NewLocalRun(nil)
	take(slice(a, 0, 8), 1)
	ReleaseAll(refs[len(refs)-1:])
	if err := g.Release(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if _, err := lr.Acquire(slice(a, 8, 8), 1); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("Acquire on a released region: %v, want ErrReleased", err)
	}
	lr.Close()
}

// Detach hands a local reference over as its region, still held until
// LeaveAll drops it (so the region's Release still waits for it), and
// zeroes the Ref; a remote one and a proxy's it leaves for Release.
func TestDetachLeaveAll(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	a := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	b := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	ra, rb := g.regionOf(t, a), g.regionOf(t, b)
	gate := &fakeGate{}
	p := mustProxy(t, g, make([]byte, 4096), buffer.AccessReadWrite, gate)
	rp := g.regionOf(t, p)
	var refs []Ref
	for _, h := range []buffer.Buffer{a, a, b, p} {
		ref, err := g.AcquireLocal(h)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	remote, err := g.AcquireRemote(ra.id, ra.key, 0, 8, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	refs = append(refs, remote, Ref{})
	var rs []*Region
	for i := range refs {
		held := refs[i].Held()
		if rs = append(rs, refs[i].Detach()); rs[i] == nil && refs[i].Held() != held {
			t.Fatalf("Detach of ref %d changed it, returning nil", i)
		}
		refs[i].Release() // what Detach did not take
		if refs[i].Held() || refs[i].Bytes() != nil {
			t.Fatalf("ref %d not zero after Detach and Release", i)
		}
	}
	if rs[0] != ra || rs[1] != ra || rs[2] != rb || rs[3] != nil || rs[4] != nil || rs[5] != nil {
		t.Fatalf("Detach gave %v, want a, a, b and nil for the proxy's, the remote one and the zero one", rs)
	}
	if ra.Refs() != 2 || rb.Refs() != 1 || ra.remote.Load() != 0 || rp.Refs() != 0 || gate.in.Load() != 0 {
		t.Fatalf("after Detach and Release: a %d (remote %d), b %d, proxy %d references, gate %d users; want 2 (0), 1, 0, 0",
			ra.Refs(), ra.remote.Load(), rb.Refs(), rp.Refs(), gate.in.Load())
	}
	LeaveAll(rs)
	if ra.Refs() != 0 || rb.Refs() != 0 {
		t.Fatalf("after LeaveAll a holds %d, b %d references, want 0", ra.Refs(), rb.Refs())
	}
}

// AcquireNear resolves a handle in the region given, taking one reference
// written in place, and refuses (nil, nothing taken) every handle
// AcquireLocalOf would refuse or resolve elsewhere: another region, a
// wrong key, out of range, another owner's, a proxy's, a released region.
func TestAcquireNear(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	a := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	b := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	ra, rb := g.regionOf(t, a), g.regionOf(t, b)
	slice := func(h buffer.Buffer, off, n uint64) *buffer.Buffer { return mustSlice(t, h, off, n) }
	var ref Ref
	mem := g.AcquireNear(ra, slice(a, 8, 8), &ref)
	if len(mem) != 8 || cap(mem) != 8 || &mem[0] != &ra.mem[8] || ref.Region() != ra || &ref.Bytes()[0] != &mem[0] || ra.Refs() != 1 {
		t.Fatalf("AcquireNear in its region: %d bytes, ref of %v, %d references", len(mem), ref.Region() == ra, ra.Refs())
	}
	ref.Release()
	wrongKey := *slice(a, 16, 8)
	wrongKey.Key[buffer.KeySize-1] ^= 0x80
	pastEnd := *slice(a, 4088, 8)
	pastEnd.Offset += 8
	tooLong := *slice(a, 4088, 8)
	tooLong.Length = 1<<64 - 1
	otherOwner := *slice(a, 16, 8)
	otherOwner.OwnerID ^= 1
	empty := *slice(a, 0, 8)
	empty.Length = 0
	proxy := mustProxy(t, g, make([]byte, 4096), buffer.AccessReadWrite, &fakeGate{})
	rp := g.regionOf(t, proxy)
	for i, c := range []struct {
		near *Region
		h    *buffer.Buffer
	}{{nil, slice(a, 0, 8)}, {rb, slice(a, 0, 8)}, {ra, &wrongKey}, {ra, &pastEnd}, {ra, &tooLong}, {ra, &otherOwner}, {ra, &empty}, {rp, slice(proxy, 0, 8)}} {
		var miss Ref
		if mem := g.AcquireNear(c.near, c.h, &miss); mem != nil || miss.Held() {
			t.Fatalf("case %d: AcquireNear resolved %v", i, *c.h)
		}
	}
	if ra.Refs() != 0 || rb.Refs() != 0 || rp.Refs() != 0 {
		t.Fatalf("references left after the refusals: %d, %d, %d", ra.Refs(), rb.Refs(), rp.Refs())
	}
	if err := g.Release(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if mem := g.AcquireNear(ra, slice(a, 0, 8), &ref); mem != nil || ref.Held() {
		t.Fatal("AcquireNear resolved a handle of a released region")
	}
}

// mustSlice is h.Slice(off, n), or fails the test.
func mustSlice(t *testing.T, h buffer.Buffer, off, n uint64) *buffer.Buffer {
	t.Helper()
	s, err := h.Slice(off, n)
	if err != nil {
		t.Fatal(err)
	}
	return &s
}
