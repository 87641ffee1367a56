package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"google.golang.org/protobuf/proto"
)

const testOwner = 0x1122334455667788

// liveness bounds waits for events that must happen; tests never assert
// on how long anything took.
const liveness = 10 * time.Second

func newReg(t testing.TB, lim Limits) *Registry {
	t.Helper()
	g := NewRegistry(testOwner, lim)
	g.SetOwnerAddr("127.0.0.1:18090")
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return g
}

func mustAlloc(t testing.TB, g *Registry, size uint64, a Access) Buffer {
	t.Helper()
	b, err := g.Allocate(size, a)
	if err != nil {
		t.Fatalf("Allocate(%d, %v): %v", size, a, err)
	}
	return b
}

func mustBytes(t testing.TB, g *Registry, b Buffer) []byte {
	t.Helper()
	mem, err := g.Bytes(b)
	if err != nil {
		t.Fatalf("Bytes(%v): %v", b, err)
	}
	return mem
}

func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

// eventually polls cond until it holds; it fails the test only if cond
// never holds within the liveness bound.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// mapped reports whether every page of [p, p+n) is mapped (msync fails
// with ENOMEM on unmapped pages).
func mapped(t testing.TB, p unsafe.Pointer, n int) bool {
	t.Helper()
	_, _, e := syscall.Syscall(syscall.SYS_MSYNC, uintptr(p), uintptr(n), syscall.MS_ASYNC)
	switch e {
	case 0:
		return true
	case syscall.ENOMEM:
		return false
	}
	t.Fatalf("msync: %v", e)
	return false
}

func TestAllocate(t *testing.T) {
	g := newReg(t, Limits{})
	page := os.Getpagesize()
	sizes := []uint64{1, 7, uint64(page) - 1, uint64(page), uint64(page) + 1, 3*uint64(page) + 17, 1 << 20}
	keys := map[Key]bool{}
	ids := map[uint64]bool{}
	for _, size := range sizes {
		b := mustAlloc(t, g, size, AccessReadWrite)
		if b.OwnerID != testOwner || b.OwnerAddr != "127.0.0.1:18090" {
			t.Errorf("size %d: owner %x@%q", size, b.OwnerID, b.OwnerAddr)
		}
		if b.Region == 0 || ids[b.Region] {
			t.Errorf("size %d: region id %d is zero or reused", size, b.Region)
		}
		ids[b.Region] = true
		if b.Offset != 0 || b.Length != size || b.Access != AccessReadWrite {
			t.Errorf("size %d: handle %v", size, b)
		}
		if len(b.Key) != KeySize || KeySize != 16 {
			t.Fatalf("key size %d", len(b.Key))
		}
		if b.Key == (Key{}) || keys[b.Key] {
			t.Errorf("size %d: key zero or reused", size)
		}
		keys[b.Key] = true

		mem := mustBytes(t, g, b)
		if uint64(len(mem)) != size || uint64(cap(mem)) != size {
			t.Fatalf("size %d: len %d cap %d", size, len(mem), cap(mem))
		}
		if uintptr(unsafe.Pointer(&mem[0]))%uintptr(page) != 0 {
			t.Errorf("size %d: memory not page aligned", size)
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
		_, rmem, err := g.Acquire(b.Region, b.Key, 0, size, AccessReadWrite)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if &rmem[0] != &mem[0] || len(rmem) != len(mem) {
			t.Errorf("Acquire and Bytes disagree")
		}
		g.regions[b.Region].Unref()
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
	g := newReg(t, Limits{})
	_, err := g.Allocate(0, AccessRead)
	wantErr(t, "Allocate(0)", err, ErrInvalid)
	_, err = g.Allocate(10, Access(4))
	wantErr(t, "Allocate with access 4", err, ErrInvalid)
	_, err = g.Allocate(10, AccessReadWrite|Access(1<<31))
	wantErr(t, "Allocate with high access bit", err, ErrInvalid)
	_, err = g.Allocate(math.MaxUint64, AccessRead)
	wantErr(t, "Allocate(MaxUint64)", err, ErrExhausted)
	_, err = g.Register(nil, AccessRead)
	wantErr(t, "Register(nil)", err, ErrInvalid)
	_, err = g.Register([]byte{}, AccessRead)
	wantErr(t, "Register(empty)", err, ErrInvalid)
	_, err = g.Register(make([]byte, 8), Access(8))
	wantErr(t, "Register with access 8", err, ErrInvalid)
	if st := g.Stats(); st != (Stats{}) {
		t.Errorf("failed calls left %+v", st)
	}
}

// TestReleaseUnmaps checks that Release unmaps allocated memory of every
// size, including sizes that are not a multiple of the page size.
func TestReleaseUnmaps(t *testing.T) {
	g := newReg(t, Limits{})
	page := os.Getpagesize()
	for _, size := range []int{1, page - 1, page, 5*page + 1} {
		b := mustAlloc(t, g, uint64(size), AccessRead)
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
	g := newReg(t, Limits{})
	p := make([]byte, 100)
	copy(p, "hello")
	b, err := g.Register(p, AccessWrite)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	if b.Length != 100 || b.Access != AccessWrite || b.Offset != 0 {
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
	if st := g.Stats(); st != (Stats{}) {
		t.Errorf("Stats after release %+v", st)
	}
	// The caller's memory is still the caller's after Release.
	p[0] = 'H'
	if string(p[:5]) != "Hello" {
		t.Errorf("caller slice damaged")
	}
	_, err = g.Bytes(b)
	wantErr(t, "Bytes after Release", err, ErrReleased)
}

//go:noinline
func registerGarbage(t *testing.T, g *Registry, done chan struct{}) Buffer {
	p := make([]byte, 4096)
	runtime.AddCleanup(&p[0], func(ch chan struct{}) { close(ch) }, done)
	b, err := g.Register(p, AccessRead)
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
	g := newReg(t, Limits{})
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

func TestSlice(t *testing.T) {
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 1000, AccessReadWrite)
	mem := mustBytes(t, g, b)
	for i := range mem {
		mem[i] = byte(i)
	}

	s, err := b.Slice(100, 200)
	if err != nil {
		t.Fatal(err)
	}
	if s.Offset != 100 || s.Length != 200 || s.Region != b.Region || s.Key != b.Key || s.Access != b.Access || s.OwnerID != b.OwnerID {
		t.Fatalf("slice %v", s)
	}
	ss, err := s.Slice(50, 20)
	if err != nil {
		t.Fatal(err)
	}
	if ss.Offset != 150 || ss.Length != 20 || ss.End() != 170 {
		t.Fatalf("nested slice %v", ss)
	}
	if got := mustBytes(t, g, ss); !bytes.Equal(got, mem[150:170]) || &got[0] != &mem[150] {
		t.Errorf("nested slice memory %v", got)
	}
	if got := mustBytes(t, g, ss); cap(got) != 20 {
		t.Errorf("slice memory cap %d, want 20 (no access past the slice)", cap(got))
	}
	// A nested slice cannot grow past its parent even though the region could.
	_, err = s.Slice(150, 51)
	wantErr(t, "slice past parent", err, ErrOutOfRange)

	empty, err := b.Slice(1000, 0)
	if err != nil || empty.Length != 0 || empty.Offset != 1000 {
		t.Errorf("empty slice at end: %v %v", empty, err)
	}
	whole, err := b.Slice(0, 1000)
	if err != nil || whole != b {
		t.Errorf("whole slice: %v %v", whole, err)
	}

	bad := []struct{ off, n uint64 }{
		{1001, 0},
		{0, 1001},
		{1000, 1},
		{999, 2},
		{math.MaxUint64, 0},
		{math.MaxUint64, 1},
		{0, math.MaxUint64},
		{1, math.MaxUint64},
		{math.MaxUint64, math.MaxUint64},
		{500, math.MaxUint64 - 499}, // off+n wraps to 1
	}
	for _, c := range bad {
		_, err := b.Slice(c.off, c.n)
		if !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Slice(%d, %d) = %v, want ErrOutOfRange", c.off, c.n, err)
		}
	}
}

func TestCheckRange(t *testing.T) {
	const M = math.MaxUint64
	cases := []struct {
		size, off, n uint64
		ok           bool
	}{
		{0, 0, 0, true},
		{0, 0, 1, false},
		{0, 1, 0, false},
		{10, 0, 10, true},
		{10, 10, 0, true},
		{10, 9, 1, true},
		{10, 9, 2, false},
		{10, 11, 0, false},
		{10, 0, 11, false},
		{10, M, 0, false},
		{10, M, 1, false},
		{10, 1, M, false},
		{10, M, M, false},
		{10, 5, M - 4, false}, // off+n wraps to 0
		{M, 0, M, true},
		{M, M, 0, true},
		{M, 1, M, false},
		{M, M, 1, false},
		{M, M - 1, 1, true},
		{M, M / 2, M/2 + 1, true},
		{M, M/2 + 1, M/2 + 1, false},
	}
	for _, c := range cases {
		err := CheckRange(c.size, c.off, c.n)
		if c.ok && err != nil {
			t.Errorf("CheckRange(%d, %d, %d) = %v, want nil", c.size, c.off, c.n, err)
		}
		if !c.ok && !errors.Is(err, ErrOutOfRange) {
			t.Errorf("CheckRange(%d, %d, %d) = %v, want ErrOutOfRange", c.size, c.off, c.n, err)
		}
	}
}

func TestAcquireChecks(t *testing.T) {
	g := newReg(t, Limits{})
	ro := mustAlloc(t, g, 100, AccessRead)
	wo := mustAlloc(t, g, 100, AccessWrite)
	var badKey Key
	copy(badKey[:], ro.Key[:])
	badKey[KeySize-1] ^= 1
	const M = math.MaxUint64

	cases := []struct {
		name   string
		region uint64
		key    Key
		off, n uint64
		need   Access
		want   error
	}{
		{"ok read", ro.Region, ro.Key, 0, 100, AccessRead, nil},
		{"ok owner (need 0)", ro.Region, ro.Key, 10, 10, 0, nil},
		{"ok empty at end", ro.Region, ro.Key, 100, 0, AccessRead, nil},
		{"ok write", wo.Region, wo.Key, 0, 100, AccessWrite, nil},
		{"unknown region", 9999, ro.Key, 0, 1, AccessRead, ErrReleased},
		{"region zero", 0, Key{}, 0, 1, AccessRead, ErrReleased},
		{"unknown region beats everything", 9999, badKey, M, M, AccessReadWrite, ErrReleased},
		{"wrong key", ro.Region, badKey, 0, 1, AccessRead, ErrBadKey},
		{"zero key", ro.Region, Key{}, 0, 1, AccessRead, ErrBadKey},
		{"other region's key", ro.Region, wo.Key, 0, 1, AccessRead, ErrBadKey},
		{"key before access and bounds", ro.Region, badKey, M, M, AccessWrite, ErrBadKey},
		{"write on read-only", ro.Region, ro.Key, 0, 1, AccessWrite, ErrAccess},
		{"read-write on read-only", ro.Region, ro.Key, 0, 1, AccessReadWrite, ErrAccess},
		{"read on write-only", wo.Region, wo.Key, 0, 1, AccessRead, ErrAccess},
		{"unknown access bit", ro.Region, ro.Key, 0, 1, Access(4), ErrAccess},
		{"access before bounds", ro.Region, ro.Key, M, M, AccessWrite, ErrAccess},
		{"past end", ro.Region, ro.Key, 0, 101, AccessRead, ErrOutOfRange},
		{"offset past end", ro.Region, ro.Key, 101, 0, AccessRead, ErrOutOfRange},
		{"tail past end", ro.Region, ro.Key, 99, 2, AccessRead, ErrOutOfRange},
		{"overflow offset+length", ro.Region, ro.Key, M - 1, 2, AccessRead, ErrOutOfRange},
		{"overflow small offset", ro.Region, ro.Key, 1, M, AccessRead, ErrOutOfRange},
		{"max offset", ro.Region, ro.Key, M, 0, AccessRead, ErrOutOfRange},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, mem, err := g.Acquire(c.region, c.key, c.off, c.n, c.need)
			if c.want == nil {
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				if uint64(len(mem)) != c.n || uint64(cap(mem)) != c.n {
					t.Errorf("len %d cap %d, want %d", len(mem), cap(mem), c.n)
				}
				if r.Refs() != 1 {
					t.Errorf("refs %d after Acquire", r.Refs())
				}
				r.Unref()
				if r.Refs() != 0 {
					t.Errorf("refs %d after Unref", r.Refs())
				}
				return
			}
			if r != nil || mem != nil {
				t.Errorf("failed Acquire returned region or memory")
			}
			wantErr(t, "Acquire", err, c.want)
		})
	}
	for _, r := range g.Regions() {
		if r.Refs() != 0 {
			t.Errorf("region %d left with %d refs", r.ID(), r.Refs())
		}
	}
}

func TestLocal(t *testing.T) {
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 64, AccessRead) // owner may write its read-only buffer
	s, _ := b.Slice(8, 8)
	r, mem, err := g.Local(s)
	if err != nil {
		t.Fatalf("Local: %v", err)
	}
	copy(mem, "abcdefgh")
	r.Unref()
	if got := mustBytes(t, g, b)[8:16]; string(got) != "abcdefgh" {
		t.Errorf("local write %q", got)
	}

	other := b
	other.OwnerID++
	_, _, err = g.Local(other)
	wantErr(t, "Local of foreign handle", err, ErrInvalid)
	_, err = g.Bytes(other)
	wantErr(t, "Bytes of foreign handle", err, ErrInvalid)

	forged := b
	forged.Key[0] ^= 0xff
	_, _, err = g.Local(forged)
	wantErr(t, "Local with wrong key", err, ErrBadKey)

	wide := b
	wide.Length = 65
	_, _, err = g.Local(wide)
	wantErr(t, "Local past end", err, ErrOutOfRange)
}

func TestReleaseWaitsForReferences(t *testing.T) {
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 4096, AccessReadWrite)
	r, mem, err := g.Acquire(b.Region, b.Key, 0, 4096, AccessWrite)
	if err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { done <- g.Release(context.Background(), b) }()

	// Release has begun once the region refuses new references.
	eventually(t, "Release starts", r.Released)
	_, _, err = g.Acquire(b.Region, b.Key, 0, 1, AccessRead)
	wantErr(t, "Acquire during Release", err, ErrReleased)

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
	r.Unref()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
	case <-time.After(liveness):
		t.Fatalf("Release never returned after the last Unref")
	}
	<-r.Drained()
	_, _, err = g.Acquire(b.Region, b.Key, 0, 1, AccessRead)
	wantErr(t, "Acquire after Release", err, ErrReleased)
	if st := g.Stats(); st != (Stats{}) {
		t.Errorf("Stats after Release %+v", st)
	}
}

func TestReleaseMultipleReferences(t *testing.T) {
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 10, AccessRead)
	var regs []*Region
	for i := 0; i < 3; i++ {
		r, _, err := g.Acquire(b.Region, b.Key, 0, 10, AccessRead)
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, r)
	}
	done := make(chan error, 1)
	go func() { done <- g.Release(context.Background(), b) }()
	eventually(t, "Release starts", regs[0].Released)
	for i, r := range regs {
		select {
		case err := <-done:
			t.Fatalf("Release returned (%v) with %d references held", err, len(regs)-i)
		default:
		}
		r.Unref()
	}
	if err := <-done; err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestReleaseContextExpires(t *testing.T) {
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 3000, AccessRead)
	p := unsafe.Pointer(&mustBytes(t, g, b)[0])
	r, _, err := g.Acquire(b.Region, b.Key, 0, 3000, AccessRead)
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
	_, _, err = g.Acquire(b.Region, b.Key, 0, 1, AccessRead)
	wantErr(t, "Acquire after expired Release", err, ErrReleased)
	err = g.Release(context.Background(), b)
	wantErr(t, "second Release", err, ErrReleased)
	if !mapped(t, p, os.Getpagesize()) {
		t.Fatalf("memory unmapped while a reference is held")
	}
	if st := g.Stats(); st.Regions != 0 || st.Bytes != 3000 {
		t.Errorf("Stats while draining %+v, want 0 regions, 3000 bytes", st)
	}
	r.Unref()
	eventually(t, "region freed after last Unref", func() bool { return g.Stats().Bytes == 0 })
}

func TestReleaseCanceledContextUnreferenced(t *testing.T) {
	// With no references the release completes at once, so a context that
	// is already done must not turn it into an error.
	g := newReg(t, Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 200; i++ {
		b := mustAlloc(t, g, 10, AccessRead)
		if err := g.Release(ctx, b); err != nil {
			t.Fatalf("release %d of an unreferenced region with a done ctx: %v", i, err)
		}
	}
	if st := g.Stats(); st != (Stats{}) {
		t.Errorf("Stats %+v", st)
	}
}

func TestReleaseErrors(t *testing.T) {
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 10, AccessRead)
	ctx := context.Background()

	wrong := b
	wrong.Key[3] ^= 0x10
	wantErr(t, "Release wrong key", g.Release(ctx, wrong), ErrBadKey)
	// The region survives a bad release.
	if _, err := g.Bytes(b); err != nil {
		t.Fatalf("region gone after bad-key release: %v", err)
	}

	foreign := b
	foreign.OwnerID = 42
	wantErr(t, "Release foreign handle", g.Release(ctx, foreign), ErrReleased)
	unknown := b
	unknown.Region = 777
	wantErr(t, "Release unknown region", g.Release(ctx, unknown), ErrReleased)

	// Releasing through a slice handle releases the whole region.
	s, _ := b.Slice(2, 3)
	if err := g.Release(ctx, s); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantErr(t, "double Release", g.Release(ctx, b), ErrReleased)
	wantErr(t, "Release with wrong key after release", g.Release(ctx, wrong), ErrReleased)
}

func TestLimits(t *testing.T) {
	page := uint64(os.Getpagesize())
	ctx := context.Background()

	t.Run("MaxBytes", func(t *testing.T) {
		g := newReg(t, Limits{MaxBytes: 2 * page})
		_, err := g.Allocate(2*page+1, AccessRead)
		wantErr(t, "Allocate over MaxBytes", err, ErrExhausted)
		a := mustAlloc(t, g, page, AccessRead)
		b := mustAlloc(t, g, page-10, AccessRead)
		_, err = g.Allocate(11, AccessRead)
		wantErr(t, "Allocate past MaxBytes", err, ErrExhausted)
		_, err = g.Register(make([]byte, 11), AccessRead)
		wantErr(t, "Register past MaxBytes", err, ErrExhausted)
		c := mustAlloc(t, g, 10, AccessRead) // exactly at the limit
		if st := g.Stats(); st.Bytes != 2*page || st.Regions != 3 {
			t.Errorf("Stats %+v", st)
		}
		_, err = g.Allocate(1, AccessRead)
		wantErr(t, "Allocate at MaxBytes", err, ErrExhausted)
		for _, x := range []Buffer{a, b, c} {
			if err := g.Release(ctx, x); err != nil {
				t.Fatal(err)
			}
		}
		if st := g.Stats(); st != (Stats{}) {
			t.Errorf("Stats after releases %+v", st)
		}
		mustAlloc(t, g, 2*page, AccessRead)
	})

	t.Run("MaxRegions", func(t *testing.T) {
		g := newReg(t, Limits{MaxRegions: 2})
		a := mustAlloc(t, g, 1, AccessRead)
		if _, err := g.Register(make([]byte, 1), AccessRead); err != nil {
			t.Fatal(err)
		}
		_, err := g.Allocate(1, AccessRead)
		wantErr(t, "Allocate past MaxRegions", err, ErrExhausted)
		_, err = g.Register(make([]byte, 1), AccessRead)
		wantErr(t, "Register past MaxRegions", err, ErrExhausted)
		if err := g.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		mustAlloc(t, g, 1, AccessRead)
		if st := g.Stats(); st.Regions != 2 || st.Bytes != 2 {
			t.Errorf("Stats %+v", st)
		}
	})

	t.Run("MaxRegionsConcurrent", func(t *testing.T) {
		const max = 4
		for round := 0; round < 20; round++ {
			g := NewRegistry(testOwner, Limits{MaxRegions: max})
			var ok atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := 0; i < 16; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, err := g.Allocate(1, AccessRead)
					switch {
					case err == nil:
						ok.Add(1)
					case !errors.Is(err, ErrExhausted):
						t.Errorf("Allocate: %v", err)
					}
				}()
			}
			close(start)
			wg.Wait()
			if n := ok.Load(); n != max || g.Stats().Regions != max {
				t.Fatalf("round %d: %d allocations succeeded, %d regions, limit %d", round, n, g.Stats().Regions, max)
			}
			if err := g.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("BytesAccounting", func(t *testing.T) {
		g := newReg(t, Limits{})
		var bufs []Buffer
		var want uint64
		for i := uint64(1); i <= 20; i++ {
			size := i * 1000
			if i%2 == 0 {
				b, err := g.Register(make([]byte, size), AccessReadWrite)
				if err != nil {
					t.Fatal(err)
				}
				bufs = append(bufs, b)
			} else {
				bufs = append(bufs, mustAlloc(t, g, size, AccessReadWrite))
			}
			want += size
			if st := g.Stats(); st.Bytes != want || st.Regions != int(i) {
				t.Fatalf("Stats %+v, want %d bytes", st, want)
			}
		}
		for i, b := range bufs {
			if err := g.Release(ctx, b); err != nil {
				t.Fatal(err)
			}
			want -= b.Length
			if st := g.Stats(); st.Bytes != want || st.Regions != len(bufs)-i-1 {
				t.Fatalf("Stats %+v, want %d bytes", st, want)
			}
		}
		if st := g.Stats(); st != (Stats{}) {
			t.Errorf("Stats after releases %+v", st)
		}
	})
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	g := NewRegistry(testOwner, Limits{})
	var bufs []Buffer
	for i := 0; i < 5; i++ {
		bufs = append(bufs, mustAlloc(t, g, 100, AccessRead))
	}
	user, err := g.Register(make([]byte, 50), AccessWrite)
	if err != nil {
		t.Fatal(err)
	}
	bufs = append(bufs, user)
	if err := g.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := g.Stats(); st != (Stats{}) {
		t.Errorf("Stats after Close %+v", st)
	}
	for _, b := range bufs {
		_, _, err := g.Acquire(b.Region, b.Key, 0, 1, 0)
		wantErr(t, "Acquire after Close", err, ErrReleased)
		wantErr(t, "Release after Close", g.Release(ctx, b), ErrReleased)
	}
	if err := g.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, err = g.Allocate(1, AccessRead)
	wantErr(t, "Allocate after Close", err, ErrClosed)
	_, err = g.Register(make([]byte, 1), AccessRead)
	wantErr(t, "Register after Close", err, ErrClosed)
	if st := g.Stats(); st != (Stats{}) {
		t.Errorf("Stats after failed calls %+v", st)
	}
}

func TestCloseWaitsForReferences(t *testing.T) {
	g := NewRegistry(testOwner, Limits{})
	a := mustAlloc(t, g, 10, AccessRead)
	mustAlloc(t, g, 10, AccessRead)
	r, _, err := g.Acquire(a.Region, a.Key, 0, 10, AccessRead)
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
	r.Unref()
	eventually(t, "held region freed", func() bool { return g.Stats().Bytes == 0 })

	// Close blocks until references drop when its ctx allows.
	g2 := NewRegistry(testOwner, Limits{})
	b := mustAlloc(t, g2, 10, AccessRead)
	r2, _, err := g2.Acquire(b.Region, b.Key, 0, 10, AccessRead)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g2.Close(context.Background()) }()
	eventually(t, "Close starts", r2.Released)
	select {
	case err := <-done:
		t.Fatalf("Close returned (%v) while a reference was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	r2.Unref()
	if err := <-done; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := g2.Stats(); st != (Stats{}) {
		t.Errorf("Stats %+v", st)
	}
}

type recHooks struct {
	mu       sync.Mutex
	reg      map[*Region]bool
	failNext bool
	log      []string
	t        *testing.T
}

func (h *recHooks) RegisterRegion(r *Region) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failNext {
		h.failNext = false
		return errors.New("hw says no")
	}
	if h.reg == nil {
		h.reg = map[*Region]bool{}
	}
	h.reg[r] = true
	r.BackendData = "mr"
	h.log = append(h.log, "reg")
	return nil
}

func (h *recHooks) DeregisterRegion(r *Region) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.reg[r] {
		h.t.Errorf("deregister of a region not registered")
	}
	if r.Released() { // not released: a registration undone before the region became visible
		select {
		case <-r.Drained():
		default:
			h.t.Errorf("deregister before the region drained")
		}
	}
	delete(h.reg, r)
	h.log = append(h.log, "dereg")
	return nil
}

func TestHooks(t *testing.T) {
	g := newReg(t, Limits{})
	h1, h2 := &recHooks{t: t}, &recHooks{t: t}
	g.AddHooks(h1)
	g.AddHooks(h2)
	b := mustAlloc(t, g, 10, AccessRead)
	r := g.Regions()[0]
	if r.BackendData != "mr" || len(h1.reg) != 1 || len(h2.reg) != 1 {
		t.Fatalf("hooks not run: %v %v", h1.log, h2.log)
	}
	if err := g.Release(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if len(h1.reg) != 0 || len(h2.reg) != 0 {
		t.Errorf("hooks not deregistered: %v %v", h1.log, h2.log)
	}

	// A failing hook undoes the hooks before it and leaves nothing behind.
	h2.failNext = true
	_, err := g.Register(make([]byte, 10), AccessRead)
	if err == nil || err.Error() == "" {
		t.Fatalf("Register with failing hook: %v", err)
	}
	if len(h1.reg) != 0 || len(h2.reg) != 0 {
		t.Errorf("failed registration left hook state: %v %v", h1.log, h2.log)
	}
	if st := g.Stats(); st != (Stats{}) {
		t.Errorf("failed registration left %+v", st)
	}
}

func TestProtoRoundTrip(t *testing.T) {
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 1<<16, AccessReadWrite)
	s, _ := b.Slice(100, 200)
	for _, h := range []Buffer{b, s, {OwnerID: 1, Region: 1, Access: AccessWrite}} {
		p := h.Proto()
		got, err := FromProto(p)
		if err != nil {
			t.Fatalf("FromProto(%v): %v", h, err)
		}
		if got != h {
			t.Errorf("FromProto(Proto()) = %v, want %v", got, h)
		}
		wire, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(wire) != h.MarshalledSize() {
			t.Errorf("MarshalledSize %d, marshalled %d", h.MarshalledSize(), len(wire))
		}
		var q rdmapb.Buffer
		if err := proto.Unmarshal(wire, &q); err != nil {
			t.Fatal(err)
		}
		got, err = FromProto(&q)
		if err != nil || got != h {
			t.Errorf("wire round trip: %v, %v", got, err)
		}
	}
	// Proto copies the key: changing the message does not change the handle.
	p := b.Proto()
	p.Key[0] ^= 0xff
	if b.Key[0] == p.Key[0] {
		t.Errorf("Proto shares the key with the handle")
	}
	got, err := FromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	p.Key[1] ^= 0xff
	if got.Key[1] == p.Key[1] {
		t.Errorf("FromProto shares the key with the message")
	}
}

func TestFromProtoRejects(t *testing.T) {
	valid := func() *rdmapb.Buffer {
		return &rdmapb.Buffer{OwnerId: 7, OwnerAddr: "h:1", Region: 3, Offset: 10, Length: 20, Key: make([]byte, KeySize), Access: uint32(AccessRead)}
	}
	if _, err := FromProto(valid()); err != nil {
		t.Fatalf("valid handle: %v", err)
	}
	cases := []struct {
		name string
		mod  func(p *rdmapb.Buffer) *rdmapb.Buffer
		want error
	}{
		{"nil", func(*rdmapb.Buffer) *rdmapb.Buffer { return nil }, ErrInvalid},
		{"zero owner", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.OwnerId = 0; return p }, ErrInvalid},
		{"zero region", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Region = 0; return p }, ErrInvalid},
		{"no key", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Key = nil; return p }, ErrInvalid},
		{"short key", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Key = p.Key[:KeySize-1]; return p }, ErrInvalid},
		{"long key", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Key = make([]byte, KeySize+1); return p }, ErrInvalid},
		{"access bit 4", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Access = 4; return p }, ErrInvalid},
		{"access high bit", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Access = 1<<31 | 1; return p }, ErrInvalid},
		{"offset+length overflow", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Offset = math.MaxUint64; p.Length = 1; return p }, ErrOutOfRange},
		{"length overflow", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Offset = 2; p.Length = math.MaxUint64 - 1; return p }, ErrOutOfRange},
		{"both max", func(p *rdmapb.Buffer) *rdmapb.Buffer { p.Offset = math.MaxUint64; p.Length = math.MaxUint64; return p }, ErrOutOfRange},
	}
	for _, c := range cases {
		b, err := FromProto(c.mod(valid()))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: FromProto = %v, %v; want %v", c.name, b, err, c.want)
		}
		if err != nil && !b.IsZero() {
			t.Errorf("%s: non-zero buffer with error", c.name)
		}
	}
	// Edge values that are valid.
	p := valid()
	p.Offset, p.Length, p.Access = math.MaxUint64, 0, 0
	if _, err := FromProto(p); err != nil {
		t.Errorf("max offset, zero length: %v", err)
	}
	p.Offset, p.Length = 1, math.MaxUint64-1
	if _, err := FromProto(p); err != nil {
		t.Errorf("offset+length == MaxUint64: %v", err)
	}
}

func TestMarshalledSize(t *testing.T) {
	var key Key
	for i := range key {
		key[i] = 0xff
	}
	b := Buffer{
		OwnerID:   0xfedcba9876543210,
		OwnerAddr: "127.0.0.1:18090",
		Region:    12345,
		Offset:    1 << 30,
		Length:    16 << 20,
		Key:       key,
		Access:    AccessReadWrite,
	}
	n := b.MarshalledSize()
	t.Logf("marshalled size of %v: %d bytes", b, n)
	if n > 64 {
		t.Errorf("marshalled size %d > 64", n)
	}
	wire, err := proto.Marshal(b.Proto())
	if err != nil || len(wire) != n {
		t.Errorf("proto.Marshal: %d bytes, %v", len(wire), err)
	}
}

func TestAccessAndKey(t *testing.T) {
	cases := []struct {
		a     Access
		valid bool
		s     string
	}{
		{0, true, "none"},
		{AccessRead, true, "read"},
		{AccessWrite, true, "write"},
		{AccessReadWrite, true, "read-write"},
		{4, false, "access(4)"},
		{7, false, "access(7)"},
	}
	for _, c := range cases {
		if c.a.Valid() != c.valid || c.a.String() != c.s {
			t.Errorf("%d: Valid %v String %q", uint32(c.a), c.a.Valid(), c.a.String())
		}
	}
	if !AccessReadWrite.Allows(AccessRead) || !AccessReadWrite.Allows(AccessWrite) || !AccessRead.Allows(0) {
		t.Errorf("Allows too strict")
	}
	if AccessRead.Allows(AccessWrite) || AccessWrite.Allows(AccessRead) || AccessRead.Allows(AccessReadWrite) || AccessReadWrite.Allows(4) {
		t.Errorf("Allows too lax")
	}
	if uint32(AccessRead) != uint32(rdmapb.Access_ACCESS_READ) || uint32(AccessReadWrite) != uint32(rdmapb.Access_ACCESS_READ_WRITE) {
		t.Errorf("access bits differ from the proto enum")
	}
	var k1, k2 Key
	k1[5] = 1
	if k1.Equal(k2) || !k1.Equal(k1) || !k2.Equal(Key{}) {
		t.Errorf("Key.Equal wrong")
	}
	if !(Buffer{}).IsZero() || (Buffer{Region: 1}).IsZero() {
		t.Errorf("IsZero wrong")
	}
	if s := (Buffer{OwnerID: 1, OwnerAddr: "a:1", Region: 2, Offset: 3, Length: 4, Access: AccessRead}).String(); s != "buffer{owner=0000000000000001@a:1 region=2 [3,+4) read}" {
		t.Errorf("String %q", s)
	}
}

// TestConcurrentAcquireRelease races readers against Release: every
// Acquire that succeeds must have its memory valid until Unref, and no
// Acquire may succeed once Release has returned.
func TestConcurrentAcquireRelease(t *testing.T) {
	const workers = 16
	for round := 0; round < 20; round++ {
		concurrentAcquireRelease(t, workers)
	}
}

func concurrentAcquireRelease(t *testing.T, workers int) {
	g := newReg(t, Limits{})
	b := mustAlloc(t, g, 4096, AccessReadWrite)
	var released atomic.Bool
	var wg sync.WaitGroup
	var succeeded atomic.Int64
	start := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop) // ends the workers if the test fails early
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			<-start
			after := 0 // attempts made after Release returned
			for i := 0; ; i++ {
				wasReleased := released.Load()
				off := uint64((w*64 + i) % 4000)
				r, mem, err := g.Acquire(b.Region, b.Key, off, 64, AccessWrite)
				if err != nil {
					if !errors.Is(err, ErrReleased) {
						t.Errorf("Acquire: %v", err)
						return
					}
				} else {
					if released.Load() {
						t.Errorf("Acquire succeeded after Release returned")
					}
					for j := range mem {
						mem[j] = byte(w) // memory must still be mapped
					}
					succeeded.Add(1)
					r.Unref()
				}
				if wasReleased {
					if err == nil {
						t.Errorf("Acquire succeeded after Release returned")
					}
					after++
					if after >= 10 {
						return
					}
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}(w)
	}
	close(start)
	// Let workers get going before releasing.
	eventually(t, "workers acquire", func() bool { return succeeded.Load() >= int64(workers) })
	if err := g.Release(context.Background(), b); err != nil {
		t.Fatalf("Release: %v", err)
	}
	released.Store(true)
	wg.Wait()
	if st := g.Stats(); st != (Stats{}) {
		t.Fatalf("Stats after Release %+v", st)
	}
}

// TestConcurrentRegistry exercises allocation, use and release from many
// goroutines at once under the race detector.
func TestConcurrentRegistry(t *testing.T) {
	g := newReg(t, Limits{MaxRegions: 1000})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				var b Buffer
				var err error
				if i%3 == 0 {
					b, err = g.Register(make([]byte, 100), AccessReadWrite)
				} else {
					b, err = g.Allocate(uint64(100+i), AccessReadWrite)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mem, err := g.Bytes(b)
				if err != nil {
					t.Error(err)
					return
				}
				msg := fmt.Sprintf("w%d-%d", w, i)
				copy(mem, msg)
				_ = g.Stats()
				_ = g.Regions()
				r, m, err := g.Local(b)
				if err != nil || string(m[:len(msg)]) != msg {
					t.Errorf("Local: %v %q", err, m)
					return
				}
				r.Unref()
				if err := g.Release(context.Background(), b); err != nil {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if st := g.Stats(); st != (Stats{}) {
		t.Errorf("Stats %+v", st)
	}
}

func BenchmarkAcquire(b *testing.B) {
	g := newReg(b, Limits{})
	buf := mustAlloc(b, g, 1<<20, AccessReadWrite)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, mem, err := g.Acquire(buf.Region, buf.Key, 4096, 65536, AccessWrite)
		if err != nil || len(mem) != 65536 {
			b.Fatal(err)
		}
		r.Unref()
	}
}

func BenchmarkAcquireParallel(b *testing.B) {
	g := newReg(b, Limits{})
	buf := mustAlloc(b, g, 1<<20, AccessReadWrite)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, _, err := g.Acquire(buf.Region, buf.Key, 0, 4096, AccessRead)
			if err != nil {
				b.Fatal(err)
			}
			r.Unref()
		}
	})
}
