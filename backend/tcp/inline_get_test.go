package tcp

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// A Get's request frame is a header whatever its size: a poster writes a
// 64 KiB Get itself (no hand-off to the writer goroutine, whose wake-up
// can cost a cross-core round trip), while a 64 KiB Put, whose frame
// carries its bytes, goes to the writer. Before, a Get counted its
// answer's bytes as its frame's and always woke the writer.
func TestLargeGetWrittenInline(t *testing.T) {
	p := newPair(t, Config{ConnsPerRoute: 1}, Config{})
	rt := p.newRoute(t).(*route)
	const size = inlineMax
	h, _ := backendtest.Alloc(t, p.regB, size, buffer.AccessReadWrite)
	var inline atomic.Int32
	testHookInline = func(*clientConn) { inline.Add(1) }
	t.Cleanup(func() { testHookInline = nil })
	for _, tc := range []struct {
		op         backend.Op
		wantInline bool
	}{{backend.OpRead, true}, {backend.OpWrite, false}} {
		inline.Store(0)
		var never atomic.Bool
		fc := &flagCompleter{inline: &never, done: make(chan error, 1)}
		wr := &backend.WorkRequest{Op: tc.op, Local: make([]byte, size), Remote: h, Deadline: time.Now().Add(waitTimeout), Done: fc}
		if err := rt.Post(wr); err != nil {
			t.Fatalf("%v: Post: %v", tc.op, err)
		}
		select {
		case err := <-fc.done:
			if err != nil {
				t.Fatalf("%v: %v", tc.op, err)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("%v: never reported", tc.op)
		}
		if got := inline.Load() > 0; got != tc.wantInline {
			t.Errorf("%v of %d bytes written by its poster: %v, want %v", tc.op, size, got, tc.wantInline)
		}
	}
}
