//go:build linux

package memreg

import (
	"bytes"
	"context"
	"math"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

func TestAllocate(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	page := os.Getpagesize()
	sizes := []uint64{1, 7, uint64(page) - 1, uint64(page), uint64(page) + 1, 3*uint64(page) + 17, 1 << 20}
	keys := map[buffer.Key]bool{}
	ids := map[uint64]bool{}
	for _, size := range sizes {
		b := mustAlloc(t, g, size, buffer.AccessReadWrite)
		if b.OwnerID != testOwner || b.OwnerAddr != "127.0.0.1:18090" {
			t.Errorf("size %d: owner %x@%q", size, b.OwnerID, b.OwnerAddr)
		}
		if b.Region == 0 || ids[b.Region] {
			t.Errorf("size %d: region id %d is zero or reused", size, b.Region)
		}
		ids[b.Region] = true
		if b.Offset != 0 || b.Length != size || b.Access != buffer.AccessReadWrite {
			t.Errorf("size %d: handle %v", size, b)
		}
		if len(b.Key) != buffer.KeySize || buffer.KeySize != 16 {
			t.Fatalf("key size %d", len(b.Key))
		}
		if b.Key == (buffer.Key{}) || keys[b.Key] {
			t.Errorf("size %d: key zero or reused", size)
		}
		keys[b.Key] = true

		mem := mustBytes(t, g, b)
		if uint64(len(mem)) != size || uint64(cap(mem)) != size {
			t.Fatalf("size %d: len %d cap %d", size, len(mem), cap(mem))
		}
		if a := alignOf(size); uintptr(unsafe.Pointer(&mem[0]))%a != 0 {
			t.Errorf("size %d: memory not aligned to %d", size, a)
		}
		for i, c := range mem {
			if c != 0 {
				t.Fatalf("size %d: byte %d = %d, want zeroed memory", size, i, c)
			}
		}
		for i := range mem {
			mem[i] = byte(i*7 + 1)
		}
		again := mustBytes(t, g, b)
		for i := range again {
			if again[i] != byte(i*7+1) {
				t.Fatalf("size %d: byte %d not kept", size, i)
			}
		}
		ref, err := g.AcquireRemote(b.Region, b.Key, 0, size, buffer.AccessReadWrite)
		if err != nil {
			t.Fatalf("AcquireRemote: %v", err)
		}
		if rmem := ref.Bytes(); &rmem[0] != &mem[0] || len(rmem) != len(mem) {
			t.Errorf("AcquireRemote and Bytes disagree")
		}
		ref.Release()
	}
	var total uint64
	for _, s := range sizes {
		total += s
	}
	if st := g.Stats(); st.Regions != len(sizes) || st.Bytes != total {
		t.Errorf("Stats = %+v, want %d regions, %d bytes", st, len(sizes), total)
	}
	for _, r := range g.Regions() {
		if r.Kind() != KindAllocated {
			t.Errorf("region %d kind %d", r.ID(), r.Kind())
		}
	}
}

func TestAllocateInvalid(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	_, err := g.Allocate(0, buffer.AccessRead)
	wantErr(t, "Allocate(0)", err, rdmamgr.ErrInvalid)
	_, err = g.Allocate(10, buffer.Access(16))
	wantErr(t, "Allocate with access 16", err, rdmamgr.ErrInvalid)
	_, err = g.Allocate(10, buffer.AccessReadWrite|buffer.Access(1<<31))
	wantErr(t, "Allocate with high access bit", err, rdmamgr.ErrInvalid)
	_, err = g.Allocate(math.MaxUint64, buffer.AccessRead)
	wantErr(t, "Allocate(MaxUint64)", err, rdmamgr.ErrLimit)
	_, err = g.Register(nil, buffer.AccessRead)
	wantErr(t, "Register(nil)", err, rdmamgr.ErrInvalid)
	_, err = g.Register([]byte{}, buffer.AccessRead)
	wantErr(t, "Register(empty)", err, rdmamgr.ErrInvalid)
	_, err = g.Register(make([]byte, 8), buffer.Access(16))
	wantErr(t, "Register with access 16", err, rdmamgr.ErrInvalid)
	if st := g.Stats(); !idle(st) {
		t.Errorf("failed calls left %+v", st)
	}
}

// TestReleaseUnmaps checks that Release unmaps allocated memory of every
// unpooled size, including sizes that are not a multiple of the page size.
func TestReleaseUnmaps(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	g.ownSpares(0) // TestOwnedReuse covers the memfds kept for reuse
	page := os.Getpagesize()
	for _, size := range []int{MaxPooled + 1, 2 * MaxPooled, 5*page + MaxPooled} {
		b := mustAlloc(t, g, uint64(size), buffer.AccessRead)
		p := unsafe.Pointer(&mustBytes(t, g, b)[0])
		rounded := (size + page - 1) &^ (page - 1)
		if !mapped(t, p, rounded) {
			t.Fatalf("size %d: fresh region not mapped", size)
		}
		if err := g.Release(context.Background(), b); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if mapped(t, p, rounded) {
			t.Errorf("size %d: memory still mapped after Release", size)
		}
	}
}

func TestRegisterUserMemory(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	p := make([]byte, 100)
	copy(p, "hello")
	b, err := g.Register(p, buffer.AccessWrite)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	if b.Length != 100 || b.Access != buffer.AccessWrite || b.Offset != 0 {
		t.Fatalf("handle %v", b)
	}
	mem := mustBytes(t, g, b)
	if &mem[0] != &p[0] {
		t.Fatalf("Bytes does not alias the registered slice")
	}
	if string(mem[:5]) != "hello" {
		t.Errorf("registered memory reads %q", mem[:5])
	}
	copy(mem[10:], "world")
	if string(p[10:15]) != "world" {
		t.Errorf("write through Bytes not visible in caller slice: %q", p[10:15])
	}
	s, err := b.Slice(50, 10)
	if err != nil {
		t.Fatal(err)
	}
	copy(mustBytes(t, g, s), "0123456789")
	if string(p[50:60]) != "0123456789" {
		t.Errorf("write through slice handle not visible: %q", p[50:60])
	}
	if rs := g.Regions(); len(rs) != 1 || rs[0].Kind() != KindUser {
		t.Fatalf("regions %v", rs)
	}
	if st := g.Stats(); st.Bytes != 100 || st.Regions != 1 {
		t.Errorf("Stats %+v", st)
	}
	if err := g.Release(context.Background(), b); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if st := g.Stats(); !idle(st) {
		t.Errorf("Stats after release %+v", st)
	}
	// The caller's memory is still the caller's after Release.
	p[0] = 'H'
	if string(p[:5]) != "Hello" {
		t.Errorf("caller slice damaged")
	}
	_, err = g.Bytes(b)
	wantErr(t, "Bytes after Release", err, rdmamgr.ErrReleased)
}

//go:noinline
func registerGarbage(t *testing.T, g *Registry, done chan struct{}) buffer.Buffer {
	p := make([]byte, 4096)
	runtime.AddCleanup(&p[0], func(ch chan struct{}) { close(ch) }, done)
	b, err := g.Register(p, buffer.AccessRead)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	return b
}

// TestReleaseUnpins drops every reference to registered memory after
// Release and runs the GC until the memory is collected. A region whose
// runtime.Pinner was not unpinned makes the runtime panic ("found leaking
// pinned pointer") when the pinner is finalized, and the memory would not
// be collected while it stays reachable from the registry.
func TestReleaseUnpins(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	done := make(chan struct{})
	b := registerGarbage(t, g, done)

	runtime.GC()
	select {
	case <-done:
		t.Fatalf("registered memory collected while registered")
	default:
	}

	if err := g.Release(context.Background(), b); err != nil {
		t.Fatalf("Release: %v", err)
	}
	deadline := time.After(liveness)
	for {
		runtime.GC()
		select {
		case <-done:
			return
		case <-deadline:
			t.Fatalf("released user memory never collected")
		case <-time.After(time.Millisecond):
		}
	}
}

// TestSliceMemory: a slice handle resolves to exactly its bytes of the
// region, with no capacity past them.
func TestSliceMemory(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 1000, buffer.AccessReadWrite)
	mem := mustBytes(t, g, b)
	for i := range mem {
		mem[i] = byte(i)
	}

	s, err := b.Slice(100, 200)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := s.Slice(50, 20)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustBytes(t, g, ss); !bytes.Equal(got, mem[150:170]) || &got[0] != &mem[150] {
		t.Errorf("nested slice memory %v", got)
	}
	if got := mustBytes(t, g, ss); cap(got) != 20 {
		t.Errorf("slice memory cap %d, want 20 (no access past the slice)", cap(got))
	}
}

func TestReleaseErrors(t *testing.T) {
	g := newReg(t, buffer.Limits{})
	b := mustAlloc(t, g, 10, buffer.AccessRead)
	ctx := context.Background()

	wrong := b
	wrong.Key[3] ^= 0x10
	wantErr(t, "Release wrong key", g.Release(ctx, wrong), rdmamgr.ErrBadKey)
	// The region survives a bad release.
	if _, err := g.Bytes(b); err != nil {
		t.Fatalf("region gone after bad-key release: %v", err)
	}

	foreign := b
	foreign.OwnerID = 42
	wantErr(t, "Release foreign handle", g.Release(ctx, foreign), rdmamgr.ErrReleased)
	unknown := b
	unknown.Region = 777
	wantErr(t, "Release unknown region", g.Release(ctx, unknown), rdmamgr.ErrReleased)

	// Releasing through a slice handle releases the whole region.
	s, _ := b.Slice(2, 3)
	if err := g.Release(ctx, s); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantErr(t, "double Release", g.Release(ctx, b), rdmamgr.ErrReleased)
	wantErr(t, "Release with wrong key after release", g.Release(ctx, wrong), rdmamgr.ErrReleased)
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	g := NewRegistry(testOwner, buffer.Limits{})
	var bufs []buffer.Buffer
	for i := 0; i < 5; i++ {
		bufs = append(bufs, mustAlloc(t, g, 100, buffer.AccessRead))
	}
	user, err := g.Register(make([]byte, 50), buffer.AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	bufs = append(bufs, user)
	if err := g.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := g.Stats(); !idle(st) || st.Slabs != 0 {
		t.Errorf("Stats after Close %+v, want no region and no slab", st)
	}
	for _, b := range bufs {
		_, err := g.AcquireLocal(b)
		wantErr(t, "AcquireLocal after Close", err, rdmamgr.ErrReleased)
		_, err = g.AcquireRemote(b.Region, b.Key, 0, 1, buffer.AccessRead)
		wantErr(t, "AcquireRemote after Close", err, rdmamgr.ErrReleased)
		wantErr(t, "Release after Close", g.Release(ctx, b), rdmamgr.ErrReleased)
	}
	if err := g.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, err = g.Allocate(1, buffer.AccessRead)
	wantErr(t, "Allocate after Close", err, rdmamgr.ErrClosed)
	_, err = g.Register(make([]byte, 1), buffer.AccessRead)
	wantErr(t, "Register after Close", err, rdmamgr.ErrClosed)
	if st := g.Stats(); !idle(st) {
		t.Errorf("Stats after failed calls %+v", st)
	}
}

func TestCloseWaitsForReferences(t *testing.T) {
	g := NewRegistry(testOwner, buffer.Limits{})
	a := mustAlloc(t, g, 10, buffer.AccessRead)
	mustAlloc(t, g, 10, buffer.AccessRead)
	ref, err := g.AcquireRemote(a.Region, a.Key, 0, 10, buffer.AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	wantErr(t, "Close with held ref", g.Close(ctx), context.DeadlineExceeded)
	if err := g.Close(context.Background()); err != nil {
		t.Errorf("Close after Close: %v", err)
	}
	if st := g.Stats(); st.Regions != 0 || st.Bytes != 10 {
		t.Errorf("Stats while draining %+v", st)
	}
	ref.Release()
	eventually(t, "held region freed", func() bool { return g.Stats().Bytes == 0 })

	// Close blocks until references drop when its ctx allows.
	g2 := NewRegistry(testOwner, buffer.Limits{})
	b := mustAlloc(t, g2, 10, buffer.AccessRead)
	ref2, err := g2.AcquireLocal(b)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g2.Close(context.Background()) }()
	eventually(t, "Close starts", ref2.Region().Released)
	select {
	case err := <-done:
		t.Fatalf("Close returned (%v) while a reference was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	ref2.Release()
	if err := <-done; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := g2.Stats(); st != (Stats{}) {
		t.Errorf("Stats %+v", st)
	}
}
