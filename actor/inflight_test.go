package actor

import (
	"bytes"
	crand "crypto/rand"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// The initiator releases its local buffer (caller memory, pinned) while
// gets into it are in flight: once ReleaseBuffer returns, the memory is the
// caller's and no byte of those gets lands in it any more.
func TestReleaseLocalWithGetsInFlight(t *testing.T) {
	sys, a, b := newPair(t)
	ctx := testCtx(t)
	const n, parts = 16 << 20, 8
	user := make([]byte, n)
	local, err := a.Client().RequestBuffer(ctx, n, buffer.AccessReadWrite, WithMemory(user))
	if err != nil {
		t.Fatal(err)
	}
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), n, buffer.AccessReadWrite)
	crand.Read(mustBytes(t, b, remote))
	qp := requestQP(t, ctx, a, b.PID())
	var ws []*queuepair.WorkRequest
	for i := range uint64(parts) {
		l, _ := local.Slice(i*n/parts, n/parts)
		r, _ := remote.Slice(i*n/parts, n/parts)
		ws = append(ws, qp.Get(ctx, l, r))
	}
	if err := a.Client().ReleaseBuffer(ctx, local); err != nil {
		t.Fatalf("release with gets in flight: %v", err)
	}
	for i, w := range ws {
		if done, _ := w.Poll(); !done {
			t.Fatalf("get %d still pending after ReleaseBuffer returned", i)
		}
	}
	pattern := bytes.Repeat([]byte{0xAB}, n)
	copy(user, pattern)
	// Traffic on the same route orders behind any late byte.
	other := requestBuf(t, ctx, a.Client(), n, buffer.AccessReadWrite)
	if err := qp.Get(ctx, other, remote).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if !bytes.Equal(user, pattern) {
		t.Fatal("a get landed in caller memory after its buffer was released")
	}
}

// Close of the initiator's manager with operations in flight: once it
// returns, they have completed and no byte lands in caller memory.
func TestCloseWithGetsInFlight(t *testing.T) {
	sys := newSystem(t)
	a, err := New(sys, Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := startTCP(testCtx(t), a); err != nil {
		t.Fatal(err)
	}
	b := startManager(t, sys, Config{Name: "b"})
	ctx := testCtx(t)
	const n, parts = 16 << 20, 8
	user := make([]byte, n)
	local, err := a.Client().RequestBuffer(ctx, n, buffer.AccessReadWrite, WithMemory(user))
	if err != nil {
		t.Fatal(err)
	}
	remote := requestBuf(t, ctx, NewClient(sys, b.PID()), n, buffer.AccessReadWrite)
	crand.Read(mustBytes(t, b, remote))
	qp, err := a.Client().RequestQueuePair(ctx, b.PID())
	if err != nil {
		t.Fatal(err)
	}
	var ws []*queuepair.WorkRequest
	for i := range uint64(parts) {
		l, _ := local.Slice(i*n/parts, n/parts)
		r, _ := remote.Slice(i*n/parts, n/parts)
		ws = append(ws, qp.Get(ctx, l, r))
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close with gets in flight: %v", err)
	}
	for i, w := range ws {
		if done, _ := w.Poll(); !done {
			t.Fatalf("get %d still pending after Close returned", i)
		}
	}
	pattern := bytes.Repeat([]byte{0xCD}, n)
	copy(user, pattern)
	time.Sleep(50 * time.Millisecond)
	if !bytes.Equal(user, pattern) {
		t.Fatal("a get landed in caller memory after its manager closed")
	}
}
