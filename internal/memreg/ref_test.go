//go:build linux

package memreg

import (
	"context"
	"errors"
	"math"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

func TestAcquireChecks(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	ro := mustAlloc(t, g, 100, buffer.AccessRead)
	wo := mustAlloc(t, g, 100, buffer.AccessWrite)
	var badKey buffer.Key
	copy(badKey[:], ro.Key[:])
	badKey[buffer.KeySize-1] ^= 1
	const M = math.MaxUint64

	cases := []struct {
		name   string
		region uint64
		key    buffer.Key
		off, n uint64
		need   buffer.Access
		want   error
	}{
		{"ok read", ro.Region, ro.Key, 0, 100, buffer.AccessRead, nil},
		{"no access asked (the owner's use is AcquireLocal)", ro.Region, ro.Key, 10, 10, 0, rdmamgr.ErrAccess},
		{"ok empty at end", ro.Region, ro.Key, 100, 0, buffer.AccessRead, nil},
		{"ok write", wo.Region, wo.Key, 0, 100, buffer.AccessWrite, nil},
		{"unknown region", 9999, ro.Key, 0, 1, buffer.AccessRead, rdmamgr.ErrReleased},
		{"region zero", 0, buffer.Key{}, 0, 1, buffer.AccessRead, rdmamgr.ErrReleased},
		{"unknown region beats everything", 9999, badKey, M, M, buffer.AccessReadWrite, rdmamgr.ErrReleased},
		{"wrong key", ro.Region, badKey, 0, 1, buffer.AccessRead, rdmamgr.ErrBadKey},
		{"zero key", ro.Region, buffer.Key{}, 0, 1, buffer.AccessRead, rdmamgr.ErrBadKey},
		{"other region's key", ro.Region, wo.Key, 0, 1, buffer.AccessRead, rdmamgr.ErrBadKey},
		{"key before access and bounds", ro.Region, badKey, M, M, buffer.AccessWrite, rdmamgr.ErrBadKey},
		{"write on read-only", ro.Region, ro.Key, 0, 1, buffer.AccessWrite, rdmamgr.ErrAccess},
		{"read-write on read-only", ro.Region, ro.Key, 0, 1, buffer.AccessReadWrite, rdmamgr.ErrAccess},
		{"read on write-only", wo.Region, wo.Key, 0, 1, buffer.AccessRead, rdmamgr.ErrAccess},
		{"atomic on a read-only region", ro.Region, ro.Key, 0, 1, buffer.AccessAtomic, rdmamgr.ErrAccess},
		{"unknown access bit", ro.Region, ro.Key, 0, 1, buffer.Access(16), rdmamgr.ErrAccess},
		{"access before bounds", ro.Region, ro.Key, M, M, buffer.AccessWrite, rdmamgr.ErrAccess},
		{"past end", ro.Region, ro.Key, 0, 101, buffer.AccessRead, rdmamgr.ErrOutOfRange},
		{"offset past end", ro.Region, ro.Key, 101, 0, buffer.AccessRead, rdmamgr.ErrOutOfRange},
		{"tail past end", ro.Region, ro.Key, 99, 2, buffer.AccessRead, rdmamgr.ErrOutOfRange},
		{"overflow offset+length", ro.Region, ro.Key, M - 1, 2, buffer.AccessRead, rdmamgr.ErrOutOfRange},
		{"overflow small offset", ro.Region, ro.Key, 1, M, buffer.AccessRead, rdmamgr.ErrOutOfRange},
		{"max offset", ro.Region, ro.Key, M, 0, buffer.AccessRead, rdmamgr.ErrOutOfRange},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ref, err := g.AcquireRemote(c.region, c.key, c.off, c.n, c.need)
			if c.want == nil {
				if err != nil {
					t.Fatalf("AcquireRemote: %v", err)
				}
				mem, r := ref.Bytes(), ref.Region()
				if uint64(len(mem)) != c.n || uint64(cap(mem)) != c.n {
					t.Errorf("len %d cap %d, want %d", len(mem), cap(mem), c.n)
				}
				if r.Refs() != 1 || r.remote.Load() != 1 {
					t.Errorf("refs %d, remote %d after AcquireRemote", r.Refs(), r.remote.Load())
				}
				ref.Release()
				if r.Refs() != 0 || r.remote.Load() != 0 {
					t.Errorf("refs %d, remote %d after Release", r.Refs(), r.remote.Load())
				}
				return
			}
			if ref.Held() || ref.Bytes() != nil {
				t.Errorf("failed AcquireRemote returned a reference")
			}
			wantErr(t, "AcquireRemote", err, c.want)
		})
	}
	for _, r := range g.Regions() {
		if r.Refs() != 0 {
			t.Errorf("region %d left with %d refs", r.ID(), r.Refs())
		}
	}
}

func TestAcquireLocal(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 64, buffer.AccessRead) // owner may write its read-only buffer
	s, _ := b.Slice(8, 8)
	ref, err := g.AcquireLocal(s)
	if err != nil {
		t.Fatalf("AcquireLocal: %v", err)
	}
	if r := ref.Region(); r.Refs() != 1 || r.remote.Load() != 0 {
		t.Errorf("refs %d, remote %d after AcquireLocal", r.Refs(), r.remote.Load())
	}
	copy(ref.Bytes(), "abcdefgh")
	if cap(ref.Bytes()) != 8 {
		t.Errorf("cap %d, want 8", cap(ref.Bytes()))
	}
	ref.Release()
	if got := mustBytes(t, g, b)[8:16]; string(got) != "abcdefgh" {
		t.Errorf("local write %q", got)
	}

	other := b
	other.OwnerID++
	_, err = g.AcquireLocal(other)
	wantErr(t, "AcquireLocal of foreign handle", err, rdmamgr.ErrInvalid)
	_, err = g.Bytes(other)
	wantErr(t, "Bytes of foreign handle", err, rdmamgr.ErrInvalid)

	forged := b
	forged.Key[0] ^= 0xff
	_, err = g.AcquireLocal(forged)
	wantErr(t, "AcquireLocal with wrong key", err, rdmamgr.ErrBadKey)

	wide := b
	wide.Length = 65
	_, err = g.AcquireLocal(wide)
	wantErr(t, "AcquireLocal past end", err, rdmamgr.ErrOutOfRange)

	// The owner's use outlives revocation and leases.
	if err := g.SetLease(b, time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	if err := g.Revoke(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	ref, err = g.AcquireLocal(b)
	if err != nil {
		t.Fatalf("AcquireLocal of a revoked, expired buffer: %v", err)
	}
	ref.Release()
}

// Release gives back exactly one reference, zeroes the Ref, and does
// nothing the second time or on a zero Ref; a second copy released
// beyond the references taken panics instead of freeing memory in use.
func TestRefRelease(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 64, buffer.AccessReadWrite)
	var zero Ref
	zero.Release()

	remote, err := g.AcquireRemote(b.Region, b.Key, 0, 8, buffer.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	local, err := g.AcquireLocal(b)
	if err != nil {
		t.Fatal(err)
	}
	r := remote.Region()
	if r.Refs() != 2 || r.remote.Load() != 1 {
		t.Fatalf("refs %d remote %d", r.Refs(), r.remote.Load())
	}
	copied := remote
	remote.Release()
	remote.Release()
	if remote.Held() || remote.Bytes() != nil || remote.Region() != nil {
		t.Fatal("Release left the Ref set")
	}
	if r.Refs() != 1 || r.remote.Load() != 0 {
		t.Fatalf("after the remote Release: refs %d remote %d", r.Refs(), r.remote.Load())
	}
	local.Release()
	local.Release()
	if r.Refs() != 0 {
		t.Fatalf("after the local Release: refs %d", r.Refs())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("releasing a copy past the references taken did not panic")
		}
		if r.Refs() != 0 || r.remote.Load() != 0 {
			t.Fatalf("the refused Release changed the counts: refs %d remote %d", r.Refs(), r.remote.Load())
		}
	}()
	copied.Release()
}

func TestReleaseWaitsForReferences(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 4096, buffer.AccessReadWrite)
	ref, err := g.AcquireRemote(b.Region, b.Key, 0, 4096, buffer.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	r, mem := ref.Region(), ref.Bytes()

	done := make(chan error, 1)
	go func() { done <- g.Release(context.Background(), b) }()

	// Release has begun once the region refuses new references.
	eventually(t, "Release starts", r.Released)
	_, err = g.AcquireRemote(b.Region, b.Key, 0, 1, buffer.AccessRead)
	wantErr(t, "AcquireRemote during Release", err, rdmamgr.ErrReleased)

	select {
	case err := <-done:
		t.Fatalf("Release returned (%v) while a reference was held", err)
	case <-r.Drained():
		t.Fatalf("region drained while a reference was held")
	case <-time.After(50 * time.Millisecond):
	}
	// The memory is still ours to use while the reference is held.
	for i := range mem {
		mem[i] = 0xAB
	}
	ref.Release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
	case <-time.After(liveness):
		t.Fatalf("Release never returned after the last Ref was released")
	}
	<-r.Drained()
	_, err = g.AcquireRemote(b.Region, b.Key, 0, 1, buffer.AccessRead)
	wantErr(t, "AcquireRemote after Release", err, rdmamgr.ErrReleased)
	if st := g.Stats(); !idle(st) {
		t.Errorf("Stats after Release %+v", st)
	}
}

func TestReleaseMultipleReferences(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 10, buffer.AccessRead)
	var refs []Ref
	for i := 0; i < 3; i++ {
		ref, err := g.AcquireRemote(b.Region, b.Key, 0, 10, buffer.AccessRead)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	done := make(chan error, 1)
	go func() { done <- g.Release(context.Background(), b) }()
	eventually(t, "Release starts", refs[0].Region().Released)
	for i := range refs {
		select {
		case err := <-done:
			t.Fatalf("Release returned (%v) with %d references held", err, len(refs)-i)
		default:
		}
		refs[i].Release()
	}
	if err := <-done; err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestReleaseContextExpires(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 3000, buffer.AccessRead)
	p := unsafe.Pointer(&mustBytes(t, g, b)[0])
	ref, err := g.AcquireLocal(b)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = g.Release(ctx, b)
	wantErr(t, "Release with expiring ctx", err, context.DeadlineExceeded)
	if errors.Is(err, context.Canceled) {
		t.Errorf("deadline reported as cancel")
	}
	// The region is gone for everyone, but its memory is kept while referenced.
	_, err = g.AcquireRemote(b.Region, b.Key, 0, 1, buffer.AccessRead)
	wantErr(t, "AcquireRemote after expired Release", err, rdmamgr.ErrReleased)
	err = g.Release(context.Background(), b)
	wantErr(t, "second Release", err, rdmamgr.ErrReleased)
	if !mapped(t, p, os.Getpagesize()) {
		t.Fatalf("memory unmapped while a reference is held")
	}
	if st := g.Stats(); st.Regions != 0 || st.Bytes != 3000 {
		t.Errorf("Stats while draining %+v, want 0 regions, 3000 bytes", st)
	}
	ref.Release()
	eventually(t, "region freed after the last Release", func() bool { return g.Stats().Bytes == 0 })
}

func TestReleaseCanceledContextUnreferenced(t *testing.T) {
	// With no references the release completes at once, so a context that
	// is already done must not turn it into an error.
	g := newReg(t, buffer.Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 200; i++ {
		b := mustAlloc(t, g, 10, buffer.AccessRead)
		if err := g.Release(ctx, b); err != nil {
			t.Fatalf("release %d of an unreferenced region with a done ctx: %v", i, err)
		}
	}
	if st := g.Stats(); !idle(st) {
		t.Errorf("Stats %+v", st)
	}
}

func BenchmarkAcquireRemote(b *testing.B) {
	g := newReg(b, buffer.Limits{})
	buf := mustAlloc(b, g, 1<<20, buffer.AccessReadWrite)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ref, err := g.AcquireRemote(buf.Region, buf.Key, 4096, 65536, buffer.AccessWrite)
		if err != nil || len(ref.Bytes()) != 65536 {
			b.Fatal(err)
		}
		ref.Release()
	}
}

func BenchmarkAcquireRemoteParallel(b *testing.B) {
	g := newReg(b, buffer.Limits{})
	buf := mustAlloc(b, g, 1<<20, buffer.AccessReadWrite)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ref, err := g.AcquireRemote(buf.Region, buf.Key, 0, 4096, buffer.AccessRead)
			if err != nil {
				b.Fatal(err)
			}
			ref.Release()
		}
	})
}

// BenchmarkAcquireLocal is a queue pair's resolution of a program's local
// handle (and its release), alone and from every core at once.
// go test -run '^$' -bench AcquireLocal ./internal/memreg
func BenchmarkAcquireLocal(b *testing.B) {
	g := newReg(b, buffer.Limits{})
	buf := mustAlloc(b, g, 4096, buffer.AccessReadWrite)
	small, _ := buf.Slice(64, 8)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ref, err := g.AcquireLocal(small)
			if err != nil || len(ref.Bytes()) != 8 {
				b.Fatal(err)
			}
			ref.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ref, err := g.AcquireLocal(small)
				if err != nil {
					b.Fatal(err)
				}
				ref.Release()
			}
		})
	})
}
