package queuepair

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// TestBatchRequestNotReposted: a request of a Submit batch cannot be
// posted again. Before, it could, and the batch's context watcher then
// cancelled the new operation when the batch's ctx ended, and the batch's
// count of operations left went below zero.
func TestBatchRequestNotReposted(t *testing.T) {
	e := newEnv(t, qpbind.Options{Timeout: time.Hour})
	local := alloc(t, e.local, 64, buffer.AccessReadWrite)
	remote := alloc(t, e.remote, 64, buffer.AccessReadWrite)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := e.qp.Submit(ctx, PutOp(local, remote))
	complete(e.route.next(t), nil)
	if err := b.Wait(context.Background()); err != nil {
		t.Fatalf("batch: %v", err)
	}
	w := b.Requests()[0]
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "batch") {
			t.Fatalf("re-posting a batch's request: recovered %v, want the batch panic", r)
		}
	}()
	e.qp.PostPut(context.Background(), w, local, remote)
	t.Fatal("PostPut of a batch's request returned")
}
