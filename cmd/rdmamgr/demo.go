package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/buffer"
)

func demoCommand() *command {
	return &command{
		name:     "demo",
		synopsis: "[--size SIZE] [--rounds N]",
		short:    "two managers move bytes both ways and verify them",
		long: `Starts two managers in this process, each with its own actor system and
protoactor remote on loopback, and moves bytes both ways over a queue pair:
the whole buffer first, then random slices; every byte is checked.`,
		setup: demoFlags,
	}
}

func demoFlags(fs *flag.FlagSet) runFunc {
	sizeS := fs.String("size", "8MiB", "buffer `size` (KiB, MiB, GiB; kB, MB, GB)")
	rounds := fs.Int("rounds", 8, "put/get rounds at random offsets and sizes (at least 1)")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on the whole run")
	var c common
	c.registerLog(fs, "warn")
	c.registerManager(fs)
	return func(ctx context.Context, e *env) error {
		size, err := parseSize(*sizeS)
		if err != nil {
			return usagef("--size: %v", err)
		}
		if *rounds < 1 {
			return usagef("--rounds %d: want at least 1", *rounds)
		}
		if *timeout <= 0 {
			return usagef("--timeout %v: want a positive duration", *timeout)
		}
		return demo(ctx, e, &c, size, *rounds, *timeout)
	}
}

// demo runs two managers and moves bytes both ways over a queue pair.
func demo(ctx context.Context, e *env, c *common, size uint64, rounds int, timeout time.Duration) error {
	stdout := e.stdout
	_, sl, err := c.logger(e.stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	a, err := startNode(ctx, "127.0.0.1:0", c, sl.With("node", "a"), actor.DefaultName, true)
	if err != nil {
		return fmt.Errorf("start manager a: %w", err)
	}
	defer a.close()
	b, err := startNode(ctx, "127.0.0.1:0", c, sl.With("node", "b"), actor.DefaultName, true)
	if err != nil {
		return fmt.Errorf("start manager b: %w", err)
	}
	defer b.close()
	fmt.Fprintf(stdout, "manager a: %s (data %s)\nmanager b: %s (data %s)\n", a.addr, a.mgr.Backend().Addr(), b.addr, b.mgr.Backend().Addr())

	ca := a.mgr.Client()
	// a asks b, across processes' worth of gRPC, for a buffer it may read and write.
	remote, err := actor.NewClient(a.sys, b.mgr.PID()).RequestBuffer(ctx, size, buffer.AccessReadWrite)
	if err != nil {
		return fmt.Errorf("request remote buffer: %w", err)
	}
	local, err := ca.RequestBuffer(ctx, size, buffer.AccessReadWrite)
	if err != nil {
		return fmt.Errorf("request local buffer: %w", err)
	}
	back, err := ca.RequestBuffer(ctx, size, buffer.AccessReadWrite)
	if err != nil {
		return fmt.Errorf("request local buffer: %w", err)
	}
	fmt.Fprintf(stdout, "remote buffer handle: %d bytes marshalled\n", remote.MarshalledSize())
	qp, err := ca.RequestQueuePair(ctx, b.mgr.PID())
	if err != nil {
		return fmt.Errorf("request queue pair: %w", err)
	}
	defer qp.Release()

	src, _ := a.mgr.Bytes(local)
	dst, _ := a.mgr.Bytes(back)
	remoteMem, _ := b.mgr.Bytes(remote)
	rand.Read(src)

	var moved, verified uint64
	mismatches := 0
	start := time.Now()
	done := 0
	for i := 0; i < rounds && ctx.Err() == nil; i++ {
		// Round 0 moves the whole buffer; the others random slices.
		off, n := uint64(0), size
		if i > 0 {
			n = 1 + mrand.Uint64N(size)
			off = mrand.Uint64N(size - n + 1)
		}
		l, _ := local.Slice(off, n)
		r, _ := remote.Slice(off, n)
		k, _ := back.Slice(off, n)
		if err := qp.Put(l, r).Wait(ctx); err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("put %d bytes at %d: %w", n, off, err)
		}
		if !bytes.Equal(remoteMem[off:off+n], src[off:off+n]) {
			mismatches++
		}
		clear(dst[off : off+n])
		if err := qp.Get(k, r).Wait(ctx); err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("get %d bytes at %d: %w", n, off, err)
		}
		if !bytes.Equal(dst[off:off+n], src[off:off+n]) {
			mismatches++
		}
		moved += 2 * n
		verified += 2 * n
		done++
	}
	el := time.Since(start)
	fmt.Fprintf(stdout, "moved %s in %d puts and %d gets in %v (%.0f MiB/s, including verification)\n",
		fmtBytes(moved), done, done, el.Round(time.Millisecond), float64(moved)/(1<<20)/el.Seconds())
	sv := b.mgr.TCP().Served()
	fmt.Fprintf(stdout, "manager b served %d ops, %s in, %s out\n", sv.Ops, fmtBytes(sv.BytesIn), fmtBytes(sv.BytesOut))
	if mismatches > 0 {
		return fmt.Errorf("%d transfers did not match", mismatches)
	}
	if done < rounds {
		fmt.Fprintf(stdout, "verified %s in %d of %d rounds before the run was stopped\n", fmtBytes(verified), done, rounds)
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return fmt.Errorf("--timeout ended the run after %d of %d rounds", done, rounds)
		}
		return errInterrupted
	}
	fmt.Fprintf(stdout, "verified %s: every byte matched\n", fmtBytes(verified))
	return nil
}
