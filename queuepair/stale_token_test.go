package queuepair

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// A token left on a work request by an earlier use (a Wait or Cancel that
// raced a re-post) does not end a later use's Wait, its Wait whose ctx
// ends, or its Cancel early: each checks the state and waits on for the
// outcome, so the memory is never handed back while the backend holds it.
func TestStaleTokenDoesNotEndAWait(t *testing.T) {
	for _, how := range []string{"Wait", "Wait with ctx ended", "Cancel"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, qpbind.Options{})
			defer e.qp.Release()
			e.route.mu.Lock()
			e.route.holdCancel = true // the cancelled request completes when the test says
			e.route.mu.Unlock()
			local := alloc(t, e.local, 8, buffer.AccessReadWrite)
			remote := alloc(t, e.remote, 8, buffer.AccessReadWrite)
			var w WorkRequest
			e.qp.PostPut(context.Background(), &w, local, remote)
			wr := e.route.next(t)
			w.sig <- struct{}{} // an earlier use's token
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if how == "Wait with ctx ended" {
				cancel()
			}
			got := make(chan error, 1)
			go func() {
				if how == "Cancel" {
					got <- w.Cancel()
					return
				}
				got <- w.Wait(ctx)
			}()
			if how != "Wait" { // the cancel reached the route: the waiter holds its token by then
				select {
				case <-e.route.cancels:
				case <-time.After(10 * time.Second):
					t.Fatal("no cancel reached the route")
				}
			}
			select {
			case err := <-got:
				complete(wr, nil) // so that Release can drain
				t.Fatalf("%s returned %v while the operation is pending (an earlier use's token)", how, err)
			case <-time.After(50 * time.Millisecond):
			}
			want := errors.New("the outcome")
			complete(wr, want)
			select {
			case err := <-got:
				if !errors.Is(err, want) {
					t.Fatalf("%s returned %v, want the operation's outcome", how, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s did not return after the outcome", how)
			}
		})
	}
}
