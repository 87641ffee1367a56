//go:build linux

// TestHostile's cases on the data port: garbage and forged hellos, another
// protocol version, replayed tokens, and malformed, oversized and refused
// frames on an authenticated connection.

package test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/rdmamgr/rdmamgr"
)

func hostileDataCases() []hostileCase {
	return []hostileCase{
		{
			name: "garbage hello on the data port",
			want: []error{rdmamgr.ErrProtocol},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := dataConn(t, h.dataAddr)
				if err := challenge(c); err != nil {
					t.Fatal(err)
				}
				junk := make([]byte, helloSize)
				fill(h.r, junk)
				copy(junk, "JUNK")
				if _, err := c.Write(junk); err != nil {
					return err
				}
				err := readAck(c)
				expect(t, "after the refusal", expectClosed(c), errConnClosed)
				return err
			},
		},
		{
			// More junk than a hello: the daemon acks and closes, or
			// resets the connection before the ack is read.
			name: "garbage flood on the data port",
			want: []error{rdmamgr.ErrProtocol, errConnClosed},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := dataConn(t, h.dataAddr)
				junk := make([]byte, 256<<10)
				fill(h.r, junk)
				_, _ = c.Write(junk) // may fail once the daemon hangs up
				if err := challenge(c); err != nil {
					return err
				}
				if err := readAck(c); err != nil {
					return err
				}
				return expectClosed(c)
			},
		},
		{
			name: "hello with a forged token",
			want: []error{rdmamgr.ErrUnauthenticated},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := dataConn(t, h.dataAddr)
				var tok [tokenSize]byte
				fill(h.r, tok[:])
				err := hello(c, wireVersion, tok)
				expect(t, "after the refusal", expectClosed(c), errConnClosed)
				return err
			},
		},
		{
			name: "hello with another protocol version",
			want: []error{rdmamgr.ErrVersion},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := dataConn(t, h.dataAddr)
				var tok [tokenSize]byte
				fill(h.r, tok[:])
				return hello(c, wireVersion+1, tok)
			},
		},
		{
			name: "replayed token",
			want: []error{rdmamgr.ErrUnauthenticated},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				addr, toks, err := rawRoute(ctx, h.d, 1)
				if err != nil {
					t.Fatalf("raw handshake: %v", err)
				}
				if err := hello(dataConn(t, addr), wireVersion, toks[0]); err != nil {
					t.Fatalf("first use of the token: %v", err)
				}
				return hello(dataConn(t, addr), wireVersion, toks[0])
			},
		},
		{
			// An authenticated connection, a good frame, then a
			// malformed one: the daemon answers the first and hangs up
			// on the second without touching memory.
			name: "malformed frame after hello",
			want: []error{errConnClosed},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := h.authConn(t, ctx)
				if err := h.rawReadPattern(c, 7, 4096, 512); err != nil {
					t.Fatalf("good frame before the bad one: %v", err)
				}
				bad := make([]byte, reqHeaderSize)
				fill(h.r, bad)
				bad[0] = 0x7f // no such op
				if _, err := c.Write(bad); err != nil {
					return fmt.Errorf("%w: %w", errConnClosed, err)
				}
				return expectClosed(c)
			},
		},
		{
			name: "oversized frame after hello",
			want: []error{errConnClosed},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := h.authConn(t, ctx)
				req := frame(opWrite, math.MaxUint32, 1, h.rw.Region, 0, h.rw.Key)
				junk := make([]byte, 64<<10)
				fill(h.r, junk)
				_, _ = c.Write(append(req, junk...))
				return expectClosed(c)
			},
		},
		{
			// A refused write's payload is skipped: the connection stays
			// in step and serves the next frame. (A wrong key is answered
			// like an unknown region, RELEASED: peers cannot probe.)
			name: "refused frame keeps the stream in step",
			want: []error{rdmamgr.ErrReleased},
			run: func(t *testing.T, ctx context.Context, h *hostileEnv) error {
				c := h.authConn(t, ctx)
				key := h.rw.Key
				key[15] ^= 0x80
				payload := make([]byte, 8192)
				fill(h.r, payload)
				if _, err := c.Write(append(frame(opWrite, 8192, 41, h.rw.Region, 0, key), payload...)); err != nil {
					return err
				}
				_, err := response(c, opWrite, 41)
				if rerr := h.rawReadPattern(c, 42, 100, 8192); rerr != nil {
					t.Errorf("frame after the refused one: %v", rerr)
				}
				return err
			},
		},
	}
}
