//go:build linux

package hostagent

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// A chain (PostOps: one packet to the agent, which posts the packet's
// posts as one chain on its far route) moves every byte, in order, and
// one operation of it refused at the far end (its buffer released) fails
// alone: its neighbours complete.
func TestEndToEndChain(t *testing.T) {
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
	const n, size = 64, 4096
	local, err := p1.Client().RequestBuffer(ctx, n*size, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	back, err := p1.Client().RequestBuffer(ctx, n*size, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := p2.Client().RequestBuffer(ctx, n*size, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := p2.Client().RequestBuffer(ctx, size, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	// A first Put maps the regions (the slow path): the chains go fast.
	if err := qp.Put(ctx, local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := qp.Get(ctx, back, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p2.Client().ReleaseBuffer(ctx, gone); err != nil {
		t.Fatal(err)
	}
	mine, _ := p1.Bytes(local)
	theirs, _ := p2.Bytes(remote)
	got, _ := p1.Bytes(back)
	_, _ = rand.Read(mine)
	slice := func(h buffer.Buffer, i int) buffer.Buffer {
		s, err := h.Slice(uint64(i*size), size)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const bad = n / 2
	for _, get := range []bool{false, true} {
		wrs := make([]*queuepair.WorkRequest, n)
		ops := make([]queuepair.Op, n)
		for i := range n {
			wrs[i] = new(queuepair.WorkRequest)
			if get {
				ops[i] = queuepair.GetOp(slice(back, i), slice(remote, i))
			} else {
				ops[i] = queuepair.PutOp(slice(local, i), slice(remote, i))
			}
		}
		ops[bad].Remote = gone
		qp.PostOps(ctx, wrs, ops)
		for i, w := range wrs {
			err := w.Wait(ctx)
			if (err != nil) != (i == bad) {
				t.Fatalf("get %v: op %d: %v", get, i, err)
			}
		}
	}
	for i := range n {
		if i == bad {
			continue
		}
		if !bytes.Equal(got[i*size:(i+1)*size], mine[i*size:(i+1)*size]) || !bytes.Equal(theirs[i*size:(i+1)*size], mine[i*size:(i+1)*size]) {
			t.Fatalf("slice %d: bytes differ", i)
		}
	}
}
