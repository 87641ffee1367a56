package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"time"

	"github.com/rdmamgr/rdmamgr/actor"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// cmdDemo runs two managers, each with its own actor system and protoactor
// remote on loopback, and moves bytes both ways over a queue pair.
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizeS := fs.String("size", "8MiB", "buffer size")
	rounds := fs.Int("rounds", 8, "put/get rounds at random offsets and sizes")
	var c common
	c.register(fs)
	c.logLevel = "warn"
	if err := fs.Parse(args); err != nil {
		return err
	}
	size, err := parseSize(*sizeS)
	if err != nil {
		return usagef("%v", err)
	}
	_, sl, err := c.logger(stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	a, err := startNode(ctx, "127.0.0.1:0", &c, sl.With("node", "a"), actor.DefaultName, true)
	if err != nil {
		return fmt.Errorf("start manager a: %w", err)
	}
	defer a.close()
	b, err := startNode(ctx, "127.0.0.1:0", &c, sl.With("node", "b"), actor.DefaultName, true)
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
	for i := 0; i < *rounds; i++ {
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
			return fmt.Errorf("put %d bytes at %d: %w", n, off, err)
		}
		if !bytes.Equal(remoteMem[off:off+n], src[off:off+n]) {
			mismatches++
		}
		clear(dst[off : off+n])
		if err := qp.Get(k, r).Wait(ctx); err != nil {
			return fmt.Errorf("get %d bytes at %d: %w", n, off, err)
		}
		if !bytes.Equal(dst[off:off+n], src[off:off+n]) {
			mismatches++
		}
		moved += 2 * n
		verified += 2 * n
	}
	el := time.Since(start)
	st, err := actor.NewClient(a.sys, b.mgr.PID()).Status(ctx)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	fmt.Fprintf(stdout, "moved %s in %d puts and %d gets in %v (%.0f MiB/s, including verification)\n",
		fmtBytes(moved), *rounds, *rounds, el.Round(time.Millisecond), float64(moved)/(1<<20)/el.Seconds())
	fmt.Fprintf(stdout, "manager b served %d frames, %s in, %s out\n", st.ServedOps, fmtBytes(st.ServedBytesIn), fmtBytes(st.ServedBytesOut))
	if mismatches > 0 {
		return fmt.Errorf("%d transfers did not match", mismatches)
	}
	fmt.Fprintf(stdout, "verified %s: every byte matched\n", fmtBytes(verified))
	return nil
}

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
