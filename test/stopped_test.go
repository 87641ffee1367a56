//go:build linux

package test

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// TestPeerStopped freezes a daemon (SIGSTOP) while gets are posted with a
// short deadline: they must fail with rdmamgr.ErrDeadline, and the late
// answers that arrive once the daemon runs again (SIGCONT) must not touch
// the local memory of the work requests that already failed. The queue
// pair then keeps working. A put posted to the frozen daemon also ends by
// its deadline, and a new queue pair works afterwards.
func TestPeerStopped(t *testing.T) {
	checkLocalClean(t)
	r := newRand(t)
	d := startDaemon(t)
	t.Cleanup(func() { _ = d.p.Signal(syscall.SIGCONT) }) // before the daemon's SIGTERM
	const size = 8 << 20
	const n = 1 << 20
	remote := remoteBuffer(t, d, size, buffer.AccessReadWrite)
	src, srcMem := localBuffer(t, size)
	dst, dstMem := localBuffer(t, size)
	qp := queuePair(t, d)
	fill(r, srcMem)
	if err := wait(qp.Put(context.Background(), src, remote)); err != nil {
		t.Fatalf("seed: %v", err)
	}

	signal(t, d, syscall.SIGSTOP)
	// Four 1 MiB gets into poisoned memory, one deadline for all.
	poison := make([]byte, size)
	fill(r, poison)
	copy(dstMem, poison)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	var ops []queuepair.Op
	for i := range uint64(4) {
		ops = append(ops, queuepair.GetOp(slice(dst, i*n, n), slice(remote, i*n, n)))
	}
	defer cancel()
	b := qp.Submit(ctx, ops...)
	for i, w := range b.Requests() {
		if err := wait(w); !errors.Is(err, rdmamgr.ErrDeadline) {
			t.Errorf("get %d from the frozen daemon: got %v; want rdmamgr.ErrDeadline", i, err)
		}
	}
	signal(t, d, syscall.SIGCONT)

	// The same queue pair works again. Responses come in order on each
	// connection: once these gets (striped over every connection) are
	// done, the late answers to the failed ones have been read too.
	for i := range uint64(4) {
		l := 2*n - i*1000 // two chunks or more: every connection
		do, ro := 4*n+i*777, i*n+i
		if err := wait(qp.Get(context.Background(), slice(dst, do, l), slice(remote, ro, l))); err != nil {
			t.Fatalf("get %d after the daemon resumed: %v", i, err)
		}
		if got, want := dstMem[do:do+l], srcMem[ro:ro+l]; !bytes.Equal(got, want) {
			t.Fatalf("get %d after the daemon resumed: %s", i, firstDiff(got, want))
		}
	}
	if got, want := dstMem[:4*n], poison[:4*n]; !bytes.Equal(got, want) {
		t.Fatalf("a late answer wrote into the memory of a get that had failed: %s", firstDiff(got, want))
	}

	// A put big enough to fill the socket buffers of the frozen daemon.
	signal(t, d, syscall.SIGSTOP)
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := wait(qp.Submit(ctx, queuepair.PutOp(src, remote)).Requests()[0])
	cancel()
	if !errors.Is(err, rdmamgr.ErrDeadline) {
		t.Errorf("put to the frozen daemon: got %v; want rdmamgr.ErrDeadline", err)
	}
	signal(t, d, syscall.SIGCONT)
	// One operation's deadline does not take the route down: the same
	// queue pair serves the next operation.
	if err := wait(qp.Get(context.Background(), slice(dst, 0, n), slice(remote, 0, n))); err != nil {
		t.Errorf("old queue pair after the stalled put: %v", err)
	}
	qp.Release()
	qp2 := queuePair(t, d)
	fill(r, srcMem)
	if err := wait(qp2.Put(context.Background(), src, remote)); err != nil {
		t.Fatalf("put on a new queue pair: %v", err)
	}
	clear(dstMem)
	if err := wait(qp2.Get(context.Background(), dst, remote)); err != nil {
		t.Fatalf("get on a new queue pair: %v", err)
	}
	if !bytes.Equal(dstMem, srcMem) {
		t.Fatalf("round trip on a new queue pair: %s", firstDiff(dstMem, srcMem))
	}
}

func signal(t *testing.T, d *daemon, sig syscall.Signal) {
	t.Helper()
	if err := d.p.Signal(sig); err != nil {
		t.Fatalf("%s: %v: %v", d.name, sig, err)
	}
}
