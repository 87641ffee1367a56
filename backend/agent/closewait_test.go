//go:build linux

package agent

import (
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// slowCompleter blocks in Complete until release is closed.
type slowCompleter struct {
	in      chan struct{} // closed when Complete was called
	release chan struct{}
}

func (c *slowCompleter) Complete(*backend.WorkRequest, error) {
	close(c.in)
	<-c.release
}

// Route.Close returns only once every request's completion was delivered
// (backend.Route: Close waits), not when the last done was read while its
// Complete is still to run or running: the conformance suite's
// RouteCloseWithWorkInFlight saw 63 of 64 completed now and then.
func TestCloseWaitsForCompletions(t *testing.T) {
	x := newPair(t)
	r := x.route(t)
	src, _ := backendtest.Alloc(t, x.p1.reg, 64, buffer.AccessReadWrite)
	dst, _ := backendtest.Alloc(t, x.p2.reg, 64, buffer.AccessReadWrite)
	c := &slowCompleter{in: make(chan struct{}), release: make(chan struct{})}
	wr, release := backendtest.NewWR(t, x.p1.reg, backend.OpWrite, src, dst, time.Time{}, c)
	defer release()
	if err := r.Post(wr); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.in:
	case <-time.After(wait):
		t.Fatal("never completed")
	}
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
		close(c.release)
		t.Fatal("Close returned while a completion was still being delivered")
	case <-time.After(100 * time.Millisecond):
	}
	close(c.release)
	select {
	case <-closed:
	case <-time.After(wait):
		t.Fatal("Close did not return once the completion was delivered")
	}
}
