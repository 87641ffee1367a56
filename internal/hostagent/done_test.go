//go:build linux

package hostagent

import (
	"bytes"
	"crypto/rand"
	"sync/atomic"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// The completing goroutine writes a done itself, but never waits on the
// attach socket: when the socket is full (here: every other inline send
// finds it so), the process's writer goroutine takes the dones over, and
// every operation is answered once, in full, every byte checked.
func TestDonesWhenTheSocketIsFull(t *testing.T) {
	var n atomic.Uint64
	testHookSocketFull = func() bool { return n.Add(1)%2 == 0 }
	defer func() { testHookSocketFull = nil }()
	secret := testSecret(t)
	sys := newSystem(t)
	a := startAgent(t, sys, "agentA", 1, secret)
	b := startAgent(t, sys, "agentB", 2, secret)
	p1 := startProcess(t, sys, "p1", secret, a.cfg.Socket)
	p2 := startProcess(t, sys, "p2", secret, b.cfg.Socket)
	ctx := testCtx(t)
	waitFor(t, "attached", func() bool { return attachedTo(p1, a.Addr()) && attachedTo(p2, b.Addr()) })
	qp, err := p1.Client().RequestQueuePair(ctx, p2.PID())
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Release()
	if k := qp.Kind(); k != backend.KindAgent {
		t.Fatalf("queue pair on %s, want agent", k)
	}
	const ops, size = 256, 1024
	local, err := p1.Client().RequestBuffer(ctx, ops*size, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := p2.Client().RequestBuffer(ctx, ops*size, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	mine, _ := p1.Bytes(local)
	theirs, _ := p2.Bytes(remote)
	_, _ = rand.Read(mine)
	wrs := make([]*queuepair.WorkRequest, 0, ops)
	for i := range ops {
		l, _ := local.Slice(uint64(i*size), size)
		r, _ := remote.Slice(uint64(i*size), size)
		w := new(queuepair.WorkRequest)
		qp.PostPut(ctx, w, l, r)
		wrs = append(wrs, w)
	}
	for i, w := range wrs {
		if err := w.Wait(ctx); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	if !bytes.Equal(mine, theirs) {
		t.Fatal("bytes differ")
	}
	if n.Load() < 2 {
		t.Fatalf("%d inline sends: the writer never took over", n.Load())
	}
}
