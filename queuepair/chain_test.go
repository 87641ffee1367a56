package queuepair

import (
	"context"
	"errors"
	"testing"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// chainEnv is a queue pair on a route that takes inline runs (takeRoute,
// InlineMax 32), reporting into a queue, with a local region and two
// remote ones of 512 bytes.
type chainEnv struct {
	e               *env
	r               *takeRoute
	qp              *QueuePair
	cq              *CompletionQueue
	local, remA, rB buffer.Buffer
}

func newChainEnv(t *testing.T) *chainEnv {
	e := newEnv(t, qpbind.Options{})
	t.Cleanup(e.qp.Release)
	r := &takeRoute{seeRoute: seeRoute{nullRoute: nullRoute{fakeRoute: *newFakeRoute()}}}
	c := &chainEnv{e: e, r: r, qp: newQueuePair(9, peerID, r, e.local, qpbind.Options{}), cq: NewCompletionQueue(128)}
	c.qp.SetCompletionQueue(c.cq)
	c.local = alloc(t, e.local, 512, buffer.AccessReadWrite)
	c.remA = alloc(t, e.remote, 512, buffer.AccessReadWrite)
	c.rB = alloc(t, e.remote, 512, buffer.AccessReadWrite)
	return c
}

func slice(t *testing.T, b buffer.Buffer, off, n uint64) buffer.Buffer {
	t.Helper()
	s, err := b.Slice(off, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// uniform returns n 8-byte operations at slot i of local and remote,
// Puts and Gets by turns, each ID i+1.
func uniform(t *testing.T, local, remote buffer.Buffer, n int) []Op {
	ops := make([]Op, n)
	for i := range ops {
		l, r := slice(t, local, 8*uint64(i), 8), slice(t, remote, 8*uint64(i), 8)
		ops[i] = PutOp(l, r)
		if i%2 == 1 {
			ops[i] = GetOp(l, r)
		}
		ops[i].ID = uint64(i + 1)
	}
	return ops
}

func newRequests(n int) []*WorkRequest {
	wrs := make([]*WorkRequest, n)
	for i := range wrs {
		wrs[i] = new(WorkRequest)
	}
	return wrs
}

// TestPrepareOpsChecks: PrepareOps takes the shorter way (prepared) only
// for a chain of plain Puts and Gets on one remote region of the peer and
// one local host region, each within the route's inline size; anything
// else is posted as PostOps posts it.
func TestPrepareOpsChecks(t *testing.T) {
	c := newChainEnv(t)
	other := alloc(t, c.e.local, 64, buffer.AccessReadWrite)
	cases := []struct {
		name   string
		change func([]Op)
		ok     bool
	}{
		{"uniform", func([]Op) {}, true},
		{"two remote regions", func(o []Op) { o[3].Remote = slice(t, c.rB, 24, 8) }, false},
		{"two local regions", func(o []Op) { o[2].Local = slice(t, other, 0, 8) }, false},
		{"over the inline size", func(o []Op) {
			o[1].Local, o[1].Remote = slice(t, c.local, 64, 64), slice(t, c.remA, 64, 64)
		}, false},
		{"an immediate", func(o []Op) { o[0].Imm = 7 }, false},
		{"an atomic", func(o []Op) { o[2] = FetchAddOp(slice(t, c.remA, 16, 8), 1) }, false},
		{"lengths differ", func(o []Op) { o[1].Local = slice(t, c.local, 8, 4) }, false},
		{"a write to a read-only handle", func(o []Op) { o[0].Remote.Access = buffer.AccessRead }, false},
		{"another peer's handle", func(o []Op) { o[0].Remote.OwnerID++ }, false},
		{"a device local", func(o []Op) { o[0].Local.Location = buffer.CUDA(0) }, false},
		{"a local range past the address space", func(o []Op) { o[0].Local.Offset = ^uint64(0) - 2 }, false},
	}
	for _, tc := range cases {
		ops := uniform(t, c.local, c.remA, 6)
		tc.change(ops)
		if got := c.qp.PrepareOps(newRequests(6), ops).pre != nil; got != tc.ok {
			t.Errorf("%s: prepared %v, want %v", tc.name, got, tc.ok)
		}
	}
	if c.qp.PrepareOps(nil, nil).pre != nil {
		t.Error("an empty chain prepared")
	}
	tcp := newQueuePair(10, peerID, c.e.route, c.e.local, qpbind.Options{}) // no inline runs
	defer tcp.Release()
	if tcp.PrepareOps(newRequests(6), uniform(t, c.local, c.remA, 6)).pre != nil {
		t.Error("prepared on a route that takes no inline runs")
	}
}

// TestChainPostInline: a prepared chain's ranges go to the route as
// inline runs armed by armChecked (the run's bytes as PostOps resolves
// them), each operation reported once with its ID and its own outcome;
// the run's local references are dropped. A chain whose local handle
// reaches past its region (a forged offset) is posted as PostOps posts
// it: that operation is refused with ErrOutOfRange, the others run.
func TestChainPostInline(t *testing.T) {
	c := newChainEnv(t)
	const n = 40
	ops, wrs := uniform(t, c.local, c.remA, n), newRequests(n)
	pc := c.qp.PrepareOps(wrs, ops)
	if pc.pre == nil {
		t.Fatal("a uniform chain not prepared")
	}
	boom := errors.New("boom")
	c.r.failAt = map[uint64]error{8 * 13: boom}
	out := make([]*WorkRequest, 2*n)
	mem, err := c.e.local.Bytes(c.local)
	if err != nil {
		t.Fatal(err)
	}
	for round, rg := range [][2]int{{0, n}, {0, n}, {3, 17}, {17, n}} {
		c.r.offered = nil
		pc.Post(context.Background(), rg[0], rg[1])
		if k := c.cq.Poll(out); k != rg[1]-rg[0] {
			t.Fatalf("round %d: reaped %d, want %d", round, k, rg[1]-rg[0])
		}
		clear(out)
		for i := rg[0]; i < rg[1]; i++ {
			w := wrs[i]
			want := error(nil)
			if i == 13 && round > 0 { // the first round's went to PostList
				want = boom
			}
			if w.ID() != uint64(i+1) || w.Err() != want {
				t.Fatalf("round %d: operation %d: id %d, %v; want %d, %v", round, i, w.ID(), w.Err(), i+1, want)
			}
		}
		if round == 0 { // first use of each request: prepare arms them
			continue
		}
		if pc.pre.base != &mem[0] {
			t.Fatalf("round %d: armChecked did not arm the run", round)
		}
		got := 0
		for _, call := range c.r.offered {
			if call.region != c.remA.Region {
				t.Fatalf("round %d: a run on region %d", round, call.region)
			}
			for _, io := range call.ops {
				i := int(io.Offset / 8)
				if &io.Local[0] != &mem[8*i] || len(io.Local) != 8 || io.Op != ops[i].Op {
					t.Fatalf("round %d: run entry for offset %d: %d bytes at the wrong place or op %v", round, io.Offset, len(io.Local), io.Op)
				}
				got++
			}
		}
		if got != rg[1]-rg[0] {
			t.Fatalf("round %d: %d operations went inline, want %d", round, got, rg[1]-rg[0])
		}
	}
	if !drained(t, c.e.local, c.local) {
		t.Fatal("the chain's local references were not all dropped")
	}

	// drained released c.local: a new region, and one handle past its 512 bytes
	forged := uniform(t, alloc(t, c.e.local, 512, buffer.AccessReadWrite), c.remA, 8)
	forged[5].Local.Offset = 600
	fw := newRequests(8)
	fc := c.qp.PrepareOps(fw, forged)
	for range 2 {
		fc.Post(context.Background(), 0, 8)
		if k := c.cq.Poll(out); k != 8 {
			t.Fatalf("forged chain: reaped %d, want 8", k)
		}
		for i, w := range fw {
			if err := w.Err(); (i == 5) != errors.Is(err, rdmamgr.ErrOutOfRange) || (i != 5 && err != nil) {
				t.Fatalf("forged chain: operation %d: %v", i, err)
			}
		}
	}
}

// TestChainPostRange: Post panics for a range outside the chain and
// posts nothing for an empty one.
func TestChainPostRange(t *testing.T) {
	c := newChainEnv(t)
	pc := c.qp.PrepareOps(newRequests(4), uniform(t, c.local, c.remA, 4))
	for _, rg := range [][2]int{{-1, 2}, {0, 5}, {3, 2}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Post(%d, %d) did not panic", rg[0], rg[1])
				}
			}()
			pc.Post(context.Background(), rg[0], rg[1])
		}()
	}
	pc.Post(context.Background(), 2, 2)
	if k := c.cq.Poll(make([]*WorkRequest, 4)); k != 0 {
		t.Fatalf("an empty range reported %d", k)
	}
	for round := range 2 { // the second round's requests are armChecked's
		pc.Post(context.Background(), 0, 4)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("round %d: re-posting requests the queue still holds did not panic", round)
				}
			}()
			pc.Post(context.Background(), 0, 4)
		}()
		if k := c.cq.Poll(make([]*WorkRequest, 8)); k != 4 {
			t.Fatalf("round %d: reaped %d, want 4", round, k)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("PrepareOps with len(wrs) != len(ops) did not panic")
		}
	}()
	c.qp.PrepareOps(newRequests(3), uniform(t, c.local, c.remA, 4))
}

// quietRoute takes inline runs and records nothing of them.
type quietRoute struct{ takeRoute }

func (r *quietRoute) RunInline(region uint64, key buffer.Key, ops []qpbind.InlineOp, errs []error) (int, bool) {
	return 0, true
}

// TestChainPostAllocs: re-posting a prepared chain allocates nothing.
func TestChainPostAllocs(t *testing.T) {
	c := newChainEnv(t)
	r := &quietRoute{takeRoute{seeRoute: seeRoute{nullRoute: nullRoute{fakeRoute: *newFakeRoute()}}}}
	qp := newQueuePair(11, peerID, r, c.e.local, qpbind.Options{})
	defer qp.Release()
	qp.SetCompletionQueue(c.cq)
	const n = 32
	pc := qp.PrepareOps(newRequests(n), uniform(t, c.local, c.remA, n))
	out := make([]*WorkRequest, n)
	post := func() {
		pc.Post(context.Background(), 0, n)
		if k := c.cq.Poll(out); k != n {
			t.Fatalf("reaped %d, want %d", k, n)
		}
	}
	post()
	if pc.pre.base == nil {
		t.Fatal("armChecked did not arm the chain")
	}
	if a := testing.AllocsPerRun(100, post); a != 0 {
		t.Fatalf("%v allocations per Post of %d operations", a, n)
	}
}
