//go:build linux

// TestHostile's cases with bad handles: forged keys, offsets beyond or
// across the end of a buffer, writes to read-only buffers, released
// buffers (also under transfers in flight) and unknown peers.

package test

import (
	"context"
	"fmt"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/buffer"
)

func hostileHandleCases() []hostileCase {
	return []hostileCase{
		{
			name: "wrong key",
			want: []error{rdmamgr.ErrBadKey},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				bad := slice(h.rw, 0, hostileOpSize)
				bad.Key[7] ^= 0x20
				expect(t, "get", wait(h.qp.Get(h.dstSlice(0, hostileOpSize), bad)), rdmamgr.ErrBadKey)
				return wait(h.qp.Put(h.srcSlice(0, hostileOpSize), bad))
			},
		},
		{
			name: "offset beyond the buffer",
			want: []error{rdmamgr.ErrOutOfRange},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				bad := slice(h.rw, 0, 4096)
				bad.Offset = h.rw.Length + 4096
				expect(t, "get", wait(h.qp.Get(h.dstSlice(0, 4096), bad)), rdmamgr.ErrOutOfRange)
				return wait(h.qp.Put(h.srcSlice(0, 4096), bad))
			},
		},
		{
			name: "range across the end of the buffer",
			want: []error{rdmamgr.ErrOutOfRange},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				bad := slice(h.rw, 0, 4096)
				bad.Offset = h.rw.Length - 100
				return wait(h.qp.Put(h.srcSlice(0, 4096), bad))
			},
		},
		{
			// The queue pair may catch this itself; either way the
			// sentinel is the same. The raw-frame case below makes the
			// daemon check it.
			name: "offset plus length overflows",
			want: []error{rdmamgr.ErrOutOfRange},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				bad := slice(h.rw, 0, 4096)
				bad.Offset = math.MaxUint64 - 100
				return wait(h.qp.Put(h.srcSlice(0, 4096), bad))
			},
		},
		{
			name: "overflowing offset in a raw frame",
			want: []error{rdmamgr.ErrOutOfRange},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := h.authConn(t, ctx)
				payload := make([]byte, 4096)
				fill(h.r, payload)
				req := frame(opWrite, 4096, 1, h.rw.Region, math.MaxUint64-7, h.rw.Key)
				if _, err := c.Write(append(req, payload...)); err != nil {
					return err
				}
				_, err := response(c, opWrite, 1)
				return err
			},
		},
		{
			name: "write to a read-only buffer",
			want: []error{rdmamgr.ErrAccess},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				return wait(h.qp.Put(h.srcSlice(0, hostileOpSize), slice(h.ro, 0, hostileOpSize)))
			},
		},
		{
			// Forged access bits get past the queue pair's own check:
			// the daemon must refuse.
			name: "write to a read-only buffer with forged access bits",
			want: []error{rdmamgr.ErrAccess},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				forged := slice(h.ro, 4096, hostileOpSize)
				forged.Access = buffer.AccessReadWrite
				return wait(h.qp.Put(h.srcSlice(0, hostileOpSize), forged))
			},
		},
		{
			name: "released buffer",
			want: []error{rdmamgr.ErrReleased},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				victim := remoteBuffer(t, h.d, hostileOpSize, buffer.AccessReadWrite)
				if err := h.d.client().ReleaseBuffer(ctx, victim); err != nil {
					t.Fatalf("release: %v", err)
				}
				expect(t, "get", wait(h.qp.Get(h.dstSlice(0, hostileOpSize), victim)), rdmamgr.ErrReleased)
				expect(t, "second release", h.d.client().ReleaseBuffer(ctx, victim), rdmamgr.ErrReleased)
				return wait(h.qp.Put(h.srcSlice(0, hostileOpSize), victim))
			},
		},
		{
			// The owner releases a buffer while a peer hammers it: the
			// release waits for the transfers in flight, which succeed;
			// every later one fails with ErrReleased.
			name: "buffer released under in-flight transfers",
			want: []error{rdmamgr.ErrReleased},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				victim := remoteBuffer(t, h.d, 4*hostileOpSize, buffer.AccessReadWrite)
				var started sync.WaitGroup
				errs := make([]error, 4)
				var wg sync.WaitGroup
				for w := range errs {
					off := uint64(w) * hostileOpSize
					l, rm := h.srcSlice(off, hostileOpSize), slice(victim, off, hostileOpSize)
					if w%2 == 1 {
						l = h.dstSlice(off, hostileOpSize)
					}
					started.Add(1)
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ; i++ {
							var err error
							if w%2 == 0 {
								err = wait(h.qp.Put(l, rm))
							} else {
								err = wait(h.qp.Get(l, rm))
							}
							if i == 3 {
								started.Done()
							}
							if err != nil {
								if i < 3 {
									started.Done()
								}
								errs[w] = err
								return
							}
						}
					}()
				}
				started.Wait()
				if err := h.d.client().ReleaseBuffer(ctx, victim); err != nil {
					t.Errorf("release under load: %v", err)
				}
				wg.Wait()
				for w, err := range errs[1:] {
					expect(t, fmt.Sprintf("worker %d", w+1), err, rdmamgr.ErrReleased)
				}
				return errs[0]
			},
		},
		{
			name: "release with a forged key",
			want: []error{rdmamgr.ErrBadKey},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				bad := h.rw
				bad.Key[0] ^= 1
				return h.d.client().ReleaseBuffer(ctx, bad)
			},
		},
		{
			name: "unknown peer: no such actor",
			want: []error{rdmamgr.ErrUnknownPeer},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				return requestQueuePair(ctx, protoactor.NewPID(h.d.addr, "no-such-manager"))
			},
		},
		{
			name: "unknown peer: closed port",
			want: []error{rdmamgr.ErrUnknownPeer},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := ln.Addr().String()
				ln.Close()
				ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				return requestQueuePair(ctx, protoactor.NewPID(addr, actor.DefaultName))
			},
		},
	}
}
