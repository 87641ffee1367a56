package queuepair

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// An operation posted on a released queue pair bound to a completion
// queue is reported there too (doc.go: every operation posted on a bound
// queue pair is reported through its queue, the only exception a full
// queue), so a program that counts its operations through the queue does
// not wait for it forever. It failed before: the ErrReleased refusal
// came before the queue's slot was taken, and only the work request
// reported it.
func TestCQReportsReleased(t *testing.T) {
	e := newEnv(t, qpbind.Options{})
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	cq := NewCompletionQueue(4)
	e.qp.SetCompletionQueue(cq)
	e.qp.Release()
	w := new(WorkRequest)
	e.qp.PostOps(context.Background(), []*WorkRequest{w}, []Op{PutOp(local, remote)})
	if err := w.Err(); !errors.Is(err, rdmamgr.ErrReleased) {
		t.Fatalf("Put on a released queue pair: %v, want ErrReleased", err)
	}
	out := make([]*WorkRequest, 4)
	if n := cq.Poll(out); n != 1 || out[0] != w {
		t.Fatalf("the queue reported %d requests, want the refused one", n)
	}
	if n := cq.Poll(out); n != 0 {
		t.Fatalf("%d more reports, want none", n)
	}
	e.qp.PostPut(context.Background(), w, local, remote) // reaped: re-posting it is fine
	if n := cq.Poll(out); n != 1 || out[0] != w || !errors.Is(w.Err(), rdmamgr.ErrReleased) {
		t.Fatalf("re-posted: %d reports, err %v", n, w.Err())
	}
}
