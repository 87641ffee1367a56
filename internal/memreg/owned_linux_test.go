package memreg

import (
	"context"
	"testing"

	"github.com/rdmamgr/rdmamgr/buffer"
)

// TestOwnedReuse checks the memfds of freed unpooled regions: reused for
// the same size and zero, never reused once Memfd handed the fd out, at
// most maxOwnedSpares kept, none larger than maxOwnedSpare.
func TestOwnedReuse(t *testing.T) {
	g := NewRegistry(testOwner, buffer.Limits{})
	spares := g.ownSpares(maxOwnedSpares)
	const size = 1 << 20
	release := func(b buffer.Buffer) {
		t.Helper()
		if err := g.Release(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	a := mustAlloc(t, g, size, buffer.AccessReadWrite)
	fa := g.regionOf(t, a).fd
	ida := idOf(t, fa)
	fill(mustBytes(t, g, a), 0xff)
	release(a)
	b := mustAlloc(t, g, size, buffer.AccessReadWrite)
	if rb := g.regionOf(t, b); rb.fd != fa || idOf(t, rb.fd) != ida {
		t.Fatalf("memfd of a freed %d-byte region not reused", size)
	}
	if i := nonZero(mustBytes(t, g, b)); i >= 0 {
		t.Fatalf("reused memfd shows byte %d of its previous owner", i)
	}
	fb, _, _ := g.regionOf(t, b).Memfd() // handed out: never reused
	release(b)
	if openFDs(map[int]fdID{fb: ida}) != 0 {
		t.Fatalf("memfd handed out by Memfd kept after its region was freed")
	}
	var bufs []buffer.Buffer
	fds := map[int]fdID{}
	for range maxOwnedSpares + 4 {
		h := mustAlloc(t, g, MaxPooled+1, buffer.AccessRead)
		bufs = append(bufs, h)
		fd := g.regionOf(t, h).fd
		fds[fd] = idOf(t, fd)
	}
	for _, h := range bufs {
		release(h)
	}
	if n := openFDs(fds); n != maxOwnedSpares {
		t.Fatalf("%d memfds kept, want %d", n, maxOwnedSpares)
	}
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	spares.drop()
	if n := openFDs(fds); n != 0 {
		t.Fatalf("%d memfds open after drop", n)
	}
	g2 := newReg(t, buffer.Limits{})
	g2.ownSpares(maxOwnedSpares)
	huge := mustAlloc(t, g2, maxOwnedSpare+1, buffer.AccessRead)
	fh := g2.regionOf(t, huge).fd
	idh := idOf(t, fh)
	if err := g2.Release(context.Background(), huge); err != nil {
		t.Fatal(err)
	}
	if openFDs(map[int]fdID{fh: idh}) != 0 {
		t.Fatalf("memfd of %d bytes kept", maxOwnedSpare+1)
	}
}
