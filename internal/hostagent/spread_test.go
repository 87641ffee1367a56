//go:build linux

package hostagent

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// spreadInbox checks, when a PutWithImm's event reaches a process, that
// the bytes of every Put its sender posted before it to this process are
// in place (check), and reports what it found.
type spreadInbox struct {
	check func(ev backend.Event) error
	found chan error
}

func (in *spreadInbox) Event(ev backend.Event) error {
	in.found <- in.check(ev)
	return nil
}

func (in *spreadInbox) Recv(peer, n uint64) (backend.Landing, error) {
	return nil, fmt.Errorf("no receive here")
}

// With several routes to a far agent (as on ibverbs, where a route is one
// RC queue pair: here TCP routes of one connection each stand in for
// them), the agent keeps its share of N (RouteConns: 4 of 8) and spreads
// the pairs of processes over them: every operation from one process to
// one far process takes the one route its (slot, via) pins, so a
// PutWithImm's event finds every Put that process posted before it in
// place, with many in flight on every route at once.
func TestFarRoutesSpread(t *testing.T) {
	const procs, width = 4, 4
	secret := testSecret(t)
	sys := newSystem(t)
	spread := func(c *Config) { c.spreadTCP, c.Routes = true, 2*width }
	a := startAgentWith(t, sys, "agentA", 1, secret, mgrOpts{conns: 1}, spread)
	b := startAgentWith(t, sys, "agentB", 2, secret, mgrOpts{conns: 1}, spread)
	ctx := testCtx(t)
	ps, qs := make([]*fakeProc, procs), make([]*fakeProc, procs)
	for i := range procs {
		ps[i], qs[i] = newFakeProc(t, secret), newFakeProc(t, secret)
		if err := ps[i].attach(ctx, a.cfg.Socket, attachOpts{secret: secret}); err != nil {
			t.Fatal(err)
		}
		if err := qs[i].attach(ctx, b.cfg.Socket, attachOpts{secret: secret}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ps[i].c.Close(); qs[i].c.Close() })
	}
	// Pair (i, j): P_i posts count(i, j) Puts of a chunk each to Q_j,
	// then a PutWithImm of one more chunk (imm: the pair), all in one
	// packet, interleaved over its targets.
	const chunk, most = 512, 8 + procs*procs
	count := func(i, j int) int { return 8 + i*procs + j } // distinct: the routes' counts tell the pairs apart
	srcs, srcMems := make([]buffer.Buffer, procs), make([][]byte, procs)
	dsts, dstMems := make([]buffer.Buffer, procs), make([][]byte, procs)
	for i := range procs {
		srcs[i], srcMems[i] = ps[i].alloc(t, procs*(most+1)*chunk, buffer.AccessReadWrite)
		dsts[i], dstMems[i] = qs[i].alloc(t, procs*(most+1)*chunk, buffer.AccessReadWrite|buffer.AccessNotify)
	}
	// P_i's bytes for Q_j are at i*... in Q_j and j*... in P_i.
	span := func(i, j int) (src, dst []byte) {
		n := (count(i, j) + 1) * chunk
		return srcMems[i][j*(most+1)*chunk:][:n], dstMems[j][i*(most+1)*chunk:][:n]
	}
	pOf := make(map[uint64]int)
	for i := range procs {
		pOf[ps[i].id] = i
	}
	ins := make([]*spreadInbox, procs)
	for j := range procs {
		ins[j] = &spreadInbox{found: make(chan error, procs), check: func(ev backend.Event) error {
			i, ok := pOf[ev.Peer]
			if !ok || ev.Imm != uint32(i<<8|j) {
				return fmt.Errorf("event at Q%d from %x, imm %x", j, ev.Peer, ev.Imm)
			}
			src, dst := span(i, j)
			if !bytes.Equal(src, dst) {
				return fmt.Errorf("P%d's event at Q%d came before its Puts' bytes", i, j)
			}
			return nil
		}}
		qs[j].sb.SetInbox(ins[j])
	}
	slice := func(h buffer.Buffer, off int) buffer.Buffer {
		s, err := h.Slice(uint64(off), chunk)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i := range procs {
		var posts []agentwire.Post
		for n := 0; n <= most; n++ {
			for j := range procs {
				if n > count(i, j) {
					continue
				}
				p := agentwire.Post{WRID: uint64(len(posts) + 1), Op: backend.OpWrite, Via: qs[j].welcome.Slot,
					FarAgent: b.Addr(), FarAgentID: qs[j].welcome.AgentID,
					Local:  localOf(slice(srcs[i], (j*(most+1)+n)*chunk)),
					Remote: slice(dsts[j], (i*(most+1)+n)*chunk)}
				if n == count(i, j) {
					p.Op, p.Imm = backend.OpWriteImm, uint32(i<<8|j)
				}
				posts = append(posts, p)
			}
		}
		ps[i].post(t, posts...)
		for wrid, d := range ps[i].dones(t, len(posts)) {
			if d.Code != 0 {
				t.Fatalf("P%d's post %d: %v", i, wrid, rdmapb.Code(d.Code))
			}
		}
	}
	for j := range procs {
		for range procs {
			if err := <-ins[j].found; err != nil {
				t.Fatal(err)
			}
		}
	}
	// A holds width routes to B, each a route of its own, and each
	// carried exactly the operations of the pairs pinned to it.
	a.mu.Lock()
	set := a.far[b.Addr()]
	a.mu.Unlock()
	if set == nil || len(set.routes) != width {
		t.Fatalf("far set %+v, want %d routes", set, width)
	}
	want := make([]uint64, width)
	for i := range procs {
		for j := range procs {
			want[pinOf(ps[i].welcome.Slot, qs[j].welcome.Slot)%width] += uint64(count(i, j) + 1)
		}
	}
	seen := map[backend.Route]bool{}
	used := 0
	for k, f := range set.routes {
		if f == nil || f.route == nil || seen[f.route] {
			t.Fatalf("route %d: %+v: not a route of its own", k, f)
		}
		seen[f.route] = true
		if got := f.route.Stats().Ops; got != want[k] {
			t.Errorf("route %d carried %d operations, want %d (the pairs pinned to it)", k, got, want[k])
		}
		if want[k] > 0 {
			used++
		}
	}
	if used < 2 {
		t.Fatalf("the pairs took %d of %d routes", used, width)
	}
}
