package actor

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	protoactor "github.com/asynkron/protoactor-go/actor"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

func newPair(t *testing.T) (*protoactor.ActorSystem, *Manager, *Manager) {
	t.Helper()
	sys := NewActorSystem(nil)
	a, err := New(sys, Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(sys, Config{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close(); sys.Shutdown() })
	return sys, a, b
}

func TestPutGetLocal(t *testing.T) {
	_, a, b := newPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 3<<20 + 17
	local, err := a.Client().RequestBuffer(ctx, n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := NewClient(a.sys, b.PID()).RequestBuffer(ctx, n, buffer.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := a.Client().RequestQueuePair(ctx, b.PID())
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Release()
	src, _ := a.Bytes(local)
	rand.Read(src)
	if err := qp.Put(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	dst, _ := b.Bytes(remote)
	if !bytes.Equal(src, dst) {
		t.Fatal("put: bytes differ")
	}
	rand.Read(dst)
	if err := qp.Get(local, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("get: bytes differ")
	}
	// wrong key
	bad := remote
	bad.Key[0] ^= 1
	if err := qp.Put(local, bad).Wait(ctx); !errors.Is(err, buffer.ErrBadKey) {
		t.Fatalf("bad key: %v", err)
	}
	// wrong peer
	if err := qp.Put(local, local).Wait(ctx); !errors.Is(err, queuepair.ErrWrongPeer) {
		t.Fatalf("wrong peer: %v", err)
	}
	st, err := b.Client().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ServedBytesIn != n || st.ServedBytesOut != n || st.RejectedOps == 0 {
		t.Fatalf("status %v", st)
	}
	_ = backend.ErrClosed
}
