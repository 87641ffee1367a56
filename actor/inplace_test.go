package actor

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// WithMemory registers the caller's memory itself: the buffer's bytes are
// p's, the same memory again shares one registration, and ReleaseBuffer
// gives it back. Only the local manager's client may; a size other than
// len(p) or a lease is refused.
func TestRequestBufferWithMemory(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	p := make([]byte, 4096)
	h, err := a.Client().RequestBuffer(ctx, 4096, buffer.AccessReadWrite, WithMemory(p))
	if err != nil {
		t.Fatal(err)
	}
	got := mustBytes(t, a, h)
	if &got[0] != &p[0] || len(got) != len(p) {
		t.Fatalf("buffer's memory is not the caller's: %p+%d, want %p+%d", &got[0], len(got), &p[0], len(p))
	}
	h2, err := a.Client().RequestBuffer(ctx, 4096, buffer.AccessReadWrite, WithMemory(p))
	if err != nil || h2.Region != h.Region {
		t.Fatalf("same memory again: region %d, %v; want region %d", h2.Region, err, h.Region)
	}
	for _, c := range []struct {
		what string
		c    *Client
		size uint64
		opts []BufferOption
		want error
	}{
		{"a peer's client", a.peerClient(b.PID()), 4096, nil, rdmamgr.ErrNotLocal},
		{"a client from a bare system", NewClient(sys, a.PID()), 4096, nil, rdmamgr.ErrNotLocal},
		{"a size other than len(p)", a.Client(), 4095, nil, rdmamgr.ErrInvalid},
		{"a lease", a.Client(), 4096, []BufferOption{WithLease(1e9)}, rdmamgr.ErrInvalid},
	} {
		_, err := c.c.RequestBuffer(ctx, c.size, buffer.AccessReadWrite, append(c.opts, WithMemory(p))...)
		if !errors.Is(err, c.want) {
			t.Errorf("in place with %s: %v, want %v", c.what, err, c.want)
		}
	}
	for _, x := range []buffer.Buffer{h, h2} {
		if err := a.Client().ReleaseBuffer(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Bytes(h); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("bytes after the last release: %v, want ErrReleased", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := a.Client().RequestBuffer(cctx, 4096, buffer.AccessReadWrite, WithMemory(p)); !errors.Is(err, context.Canceled) {
		t.Fatalf("in place under a cancelled context: %v", err)
	}
}
