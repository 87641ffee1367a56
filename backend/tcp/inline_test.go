package tcp

import (
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/backendtest"
)

// inlined is the number of frames the route's posters wrote themselves.
func inlined(rt backend.Route) uint64 {
	var n uint64
	for _, cc := range rt.(*route).conns {
		n += cc.inlined.Load()
	}
	return n
}

// TestInlineWrite: an operation alone in flight is written by its poster
// (no hand-off to the writer goroutine); a large one, or one posted while
// others are in flight, goes through the writer goroutine; every byte lands
// either way.
func TestInlineWrite(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	rt := p.newRoute(t)
	h, mem := backendtest.Alloc(t, p.regB, 2*inlineMax, buffer.AccessReadWrite)
	_, local := backendtest.Alloc(t, p.regA, 2*inlineMax, buffer.AccessReadWrite)

	for i := range 10 {
		backendtest.Random(t, local[:100])
		small, _ := h.Slice(0, 100)
		if err := do(t, rt, backend.OpWrite, local[:100], small); err != nil {
			t.Fatal(err)
		}
		backendtest.AssertSame(t, "small write", mem[:100], local[:100])
		if got := inlined(rt); got != uint64(i+1) {
			t.Fatalf("after %d one-at-a-time writes %d were written by their poster, want all", i+1, got)
		}
	}
	before := inlined(rt)
	backendtest.Random(t, local)
	if err := do(t, rt, backend.OpWrite, local, h); err != nil {
		t.Fatal(err)
	}
	backendtest.AssertSame(t, "large write", mem, local)
	if got := inlined(rt); got != before {
		t.Fatalf("a %d-byte write was written by its poster, want the writer goroutine", len(local))
	}
}
