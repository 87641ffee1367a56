package queuepair

import (
	"context"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
)

// Chain is a chain of operations prepared once and posted many times, as
// a verbs program keeps an array of work requests and re-posts runs of
// it: PrepareOps copies the operations and checks their handles once;
// Post(ctx, lo, hi) is PostOps(ctx, wrs[lo:hi], ops[lo:hi]) of that copy,
// with every outcome the same, at less cost where the checks done once
// hold for every operation (below). A Chain is its poster's: Post is not
// safe for concurrent use, nor is PostOps of the same work requests
// meanwhile (PostOps's own rule: a pending request panics).
//
// What Post skips, it skips only for a chain of plain Puts and Gets
// (no immediate, no operands) whose remote handles all name one region of
// the queue pair's peer with the access each needs, whose local handles
// all name one host region, each operation's lengths equal and non-zero,
// at most the route's inline size (internal/qpbind.InlineRunner: shm),
// and no range past the end of the address space: on such a chain, an
// inline run compares the local region the run holds references to with
// the chain's once, not each handle. Every check of the work requests
// themselves, of the regions still being registered (the local one's
// references, the remote one's at the route) and of the local bounds is
// made as PostOps makes it. Any other chain is posted exactly as PostOps
// posts it.
type Chain struct {
	q   *QueuePair
	wrs []*WorkRequest
	ops []Op
	pre *prepared // nil: not a chain Post can take a shorter way for
}

// prepared is what PrepareOps checked once of a chain whose every
// operation passes the checks Chain names.
type prepared struct {
	ops []preOp // ops[i]: the chain's operation i, compact
	// The local region every operation is in, and the end of the
	// furthest local range: a run's region (memreg.Span) must be this one
	// and at least lend bytes long.
	lreg, lowner uint64
	lkey         buffer.Key
	lend         uint64
	// base is the first byte of the region's memory that each
	// ops[i].io.Local lies in (nil: none yet): armChecked rebuilds them
	// when the run's memory starts elsewhere (rebase).
	base *byte
}

// preOp is a prepared operation: the entry of the route's list an inline
// run gives it (its local bytes as of base), and what the run writes into
// its request (armChecked), in 64 bytes where an Op takes over 200.
type preOp struct {
	io      qpbind.InlineOp
	loff, n uint64
	id      uint64
	unsig   bool
}

// rebase makes each operation's io.Local its bytes of mem, the local
// region's memory (at least p.lend bytes long).
func (p *prepared) rebase(mem []byte) {
	for i := range p.ops {
		po := &p.ops[i]
		po.io.Local = mem[po.loff : po.loff+po.n : po.loff+po.n]
	}
	p.base = &mem[0]
}

// PrepareOps returns a Chain of wrs[i] carrying ops[i], as PostOps takes
// them: both slices are copied (the chain keeps the work requests, not
// the caller's slices). It panics if len(wrs) != len(ops), as PostOps
// does; a chain with operations PostOps would refuse is prepared all the
// same, and each such operation is refused on every Post.
func (q *QueuePair) PrepareOps(wrs []*WorkRequest, ops []Op) *Chain {
	if len(wrs) != len(ops) {
		panic("queuepair: PrepareOps with len(wrs) != len(ops)")
	}
	c := &Chain{q: q, wrs: append([]*WorkRequest(nil), wrs...), ops: append([]Op(nil), ops...)}
	c.pre = q.prepareChain(c.ops)
	return c
}

// Len returns the number of operations of c.
func (c *Chain) Len() int { return len(c.ops) }

// Post posts c's operations lo through hi-1 in order, exactly as
// PostOps(ctx, wrs[lo:hi], ops[lo:hi]) of the chain's work requests and
// operations would (its contract, doc.go's, every outcome). It panics if
// lo:hi is not a range of the chain.
func (c *Chain) Post(ctx context.Context, lo, hi int) {
	if lo < 0 || hi > len(c.ops) || lo > hi {
		panic("queuepair: Chain.Post of a range outside the chain")
	}
	if lo == hi {
		return
	}
	var pre []preOp
	if c.pre != nil {
		pre = c.pre.ops[lo:hi]
	}
	c.q.postOps(ctx, c.wrs[lo:hi], c.ops[lo:hi], c.pre, pre)
}

// prepareChain checks ops as Chain describes, and returns them prepared,
// or nil when one of them does not pass.
func (q *QueuePair) prepareChain(ops []Op) *prepared {
	if q.inl == nil || len(ops) == 0 {
		return nil
	}
	first := &ops[0]
	p := &prepared{ops: make([]preOp, len(ops)), lreg: first.Local.Region, lowner: first.Local.OwnerID, lkey: first.Local.Key}
	for i := range ops {
		o := &ops[i]
		r, l := &o.Remote, &o.Local
		n := l.Length
		if !q.plainOK(o.Op, l, r) || o.Imm != 0 || o.HasImm || o.Compare != 0 || o.Swap != 0 ||
			n > uint64(q.inlMax) || r.Region != first.Remote.Region || r.Key != first.Remote.Key ||
			l.Location != buffer.Host || l.Region != p.lreg || l.OwnerID != p.lowner || l.Key != p.lkey || l.Offset+n < l.Offset {
			return nil
		}
		p.lend = max(p.lend, l.Offset+n)
		p.ops[i] = preOp{io: qpbind.InlineOp{Offset: r.Offset, Op: o.Op}, loff: l.Offset, n: n, id: o.ID, unsig: o.Unsignaled}
	}
	return p
}
