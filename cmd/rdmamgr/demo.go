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
	"github.com/rdmamgr/rdmamgr/node"
	"github.com/rdmamgr/rdmamgr/queuepair"
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
func demo(ctx context.Context, e *env, c *common, size uint64, rounds int, timeout time.Duration) (err error) {
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
	defer closeDemo(a, "a", &err)
	b, err := startNode(ctx, "127.0.0.1:0", c, sl.With("node", "b"), actor.DefaultName, true)
	if err != nil {
		return fmt.Errorf("start manager b: %w", err)
	}
	defer closeDemo(b, "b", &err)
	fmt.Fprintf(stdout, "manager a: %s (data %s)\nmanager b: %s (data %s)\n", a.Addr(), a.DataAddr(), b.Addr(), b.DataAddr())

	d, err := newDemoRun(ctx, a, b, size)
	if err != nil {
		return err
	}
	defer d.qp.Release()
	fmt.Fprintf(stdout, "remote buffer handle: %d bytes marshalled\n", d.remote.MarshalledSize())
	start := time.Now()
	done, mismatches, err := d.rounds(ctx, rounds)
	if err != nil {
		return err
	}
	el := time.Since(start)
	moved := d.moved
	fmt.Fprintf(stdout, "moved %s in %d puts and %d gets in %v (%.0f MiB/s, including verification)\n",
		fmtBytes(moved), done, done, el.Round(time.Millisecond), float64(moved)/(1<<20)/el.Seconds())
	sv := b.Manager().Served()
	fmt.Fprintf(stdout, "manager b served %d ops, %s in, %s out\n", sv.Ops, fmtBytes(sv.BytesIn), fmtBytes(sv.BytesOut))
	if mismatches > 0 {
		return fmt.Errorf("%d transfers did not match", mismatches)
	}
	if done < rounds {
		fmt.Fprintf(stdout, "verified %s in %d of %d rounds before the run was stopped\n", fmtBytes(moved), done, rounds)
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return fmt.Errorf("--timeout ended the run after %d of %d rounds", done, rounds)
		}
		return errInterrupted
	}
	fmt.Fprintf(stdout, "verified %s: every byte matched\n", fmtBytes(moved))
	return nil
}

// closeDemo closes n; a failure to close (such as a manager whose actor
// did not stop in time) fails the run unless it failed already.
func closeDemo(n *node.Node, name string, err *error) {
	if cerr := n.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("close manager %s: %w", name, cerr)
	}
}

// demoRun is what the rounds use: a queue pair from a to b, a buffer at b
// (remote) and two at a (local, the source, and back, where gets land).
type demoRun struct {
	qp                  *queuepair.QueuePair
	local, back, remote buffer.Buffer
	src, dst, remoteMem []byte
	size, moved         uint64
}

// newDemoRun asks b, across gRPC as from another process, for a buffer a
// may read and write, makes a's two buffers and the queue pair, and fills
// the source with random bytes.
func newDemoRun(ctx context.Context, a, b *node.Node, size uint64) (*demoRun, error) {
	d := &demoRun{size: size}
	ca := a.Client()
	var err error
	// b's manager PID goes to a's actor system, as a PID handed from process
	// to process would.
	pb := b.ManagerPID()
	if d.remote, err = a.ClientOf(pb.Address, pb.Id).RequestBuffer(ctx, size, buffer.AccessReadWrite); err != nil {
		return nil, fmt.Errorf("request remote buffer: %w", err)
	}
	if d.local, err = ca.RequestBuffer(ctx, size, buffer.AccessReadWrite); err != nil {
		return nil, fmt.Errorf("request local buffer: %w", err)
	}
	if d.back, err = ca.RequestBuffer(ctx, size, buffer.AccessReadWrite); err != nil {
		return nil, fmt.Errorf("request local buffer: %w", err)
	}
	if d.qp, err = ca.RequestQueuePair(ctx, b.ManagerPID()); err != nil {
		return nil, fmt.Errorf("request queue pair: %w", err)
	}
	d.src, _ = a.Manager().Bytes(d.local)
	d.dst, _ = a.Manager().Bytes(d.back)
	d.remoteMem, _ = b.Manager().Bytes(d.remote)
	rand.Read(d.src)
	return d, nil
}

// rounds puts and gets back: the whole buffer first, then random slices,
// checking every byte. It returns the rounds done before ctx ended and the
// transfers that did not match.
func (d *demoRun) rounds(ctx context.Context, rounds int) (done, mismatches int, err error) {
	for i := 0; i < rounds && ctx.Err() == nil; i++ {
		off, n := uint64(0), d.size
		if i > 0 {
			n = 1 + mrand.Uint64N(d.size)
			off = mrand.Uint64N(d.size - n + 1)
		}
		l, _ := d.local.Slice(off, n)
		r, _ := d.remote.Slice(off, n)
		k, _ := d.back.Slice(off, n)
		if err := d.qp.Put(ctx, l, r).Wait(ctx); err != nil {
			if ctx.Err() != nil {
				break
			}
			return done, mismatches, fmt.Errorf("put %d bytes at %d: %w", n, off, err)
		}
		if !bytes.Equal(d.remoteMem[off:off+n], d.src[off:off+n]) {
			mismatches++
		}
		clear(d.dst[off : off+n])
		if err := d.qp.Get(ctx, k, r).Wait(ctx); err != nil {
			if ctx.Err() != nil {
				break
			}
			return done, mismatches, fmt.Errorf("get %d bytes at %d: %w", n, off, err)
		}
		if !bytes.Equal(d.dst[off:off+n], d.src[off:off+n]) {
			mismatches++
		}
		d.moved += 2 * n
		done++
	}
	return done, mismatches, nil
}
