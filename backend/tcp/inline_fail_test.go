package tcp

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// flagCompleter records whether inline was set when the outcome came.
type flagCompleter struct {
	inline *atomic.Bool
	during atomic.Bool
	done   chan error
}

func (f *flagCompleter) Complete(_ *backend.WorkRequest, err error) {
	f.during.Store(f.inline.Load())
	f.done <- err
}

// TestInlineWriteRouteFails: a route that fails while a poster writes its
// own frame (writeInline, past its check of the route) does not report the
// operation until that poster let go of it: drain's failAll waits for the
// inline writer. It failed before (failAll reported the chunk while the
// poster was about to claim it and write its payload from the caller's
// memory: reported, then touched).
func TestInlineWriteRouteFails(t *testing.T) {
	p := newPair(t, Config{ConnsPerRoute: 1}, Config{})
	rt := p.newRoute(t).(*route)
	h, _ := backendtest.Alloc(t, p.regB, 64, buffer.AccessReadWrite)
	local := make([]byte, 64)

	var inline atomic.Bool
	fc := &flagCompleter{inline: &inline, done: make(chan error, 1)}
	testHookInline = func(cc *clientConn) {
		inline.Store(true)
		cc.r.fail(fmt.Errorf("test: route failed under an inline write: %w", rdmamgr.ErrClosed))
		select { // bounded: a fixed failAll waits for this hook to return
		case err := <-fc.done:
			fc.done <- err
		case <-time.After(200 * time.Millisecond):
		}
		inline.Store(false)
	}
	t.Cleanup(func() { testHookInline = nil })
	wr := &backend.WorkRequest{Op: backend.OpWrite, Local: local, Remote: h, Deadline: time.Now().Add(waitTimeout), Done: fc}
	if err := rt.Post(wr); err != nil {
		t.Fatalf("Post: %v", err)
	}
	testHookInline = nil
	select {
	case err := <-fc.done:
		if err == nil {
			t.Fatal("a write on a route that failed under it succeeded")
		}
	case <-time.After(waitTimeout):
		t.Fatal("the write was never reported")
	}
	if fc.during.Load() {
		t.Fatal("the write was reported while its poster was still writing it inline")
	}
}
