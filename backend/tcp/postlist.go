package tcp

import (
	"github.com/rdmamgr/rdmamgr/backend"
)

var _ backend.ListPoster = (*route)(nil)

// PostList implements backend.ListPoster: it posts wrs in order as Post
// does, but queues consecutive single-chunk operations (not write-imms or
// sends) as chains: one lock and one wake-up of its writer per chain. A
// chain goes to the route's least loaded connection (the fewest chunks in
// flight), and a list of 2×minListShare or more is spread over the
// connections to even their loads (listBatch.start): so the answers to one
// connection's share come back while the peer serves the next, and a
// re-posted share goes back where its answers came from, instead of the
// whole window moving in one wave. An operation of several chunks, a
// write-imm or send, or a wait for room in flight first queues the chain
// built so far, so each connection still sees its part of the list in
// posting order (the fence orders a write-imm or send after the WRITEs
// before it on every connection: fence.go).
func (r *route) PostList(wrs []*backend.WorkRequest) (int, error) {
	b := listBatch{r: r}
	// The route's shared counts are taken for the whole list at once,
	// and what its operations did not use is given back after: room in
	// flight for one chunk each (where there is), and the count of
	// operations posted (from the first that is).
	if len(wrs) > 1 && r.sem.tryTake(int64(len(wrs))) {
		b.room = len(wrs)
	}
	idle := false
	n := 0
	var err error
	for i, wr := range wrs {
		var o *op
		o, err = r.prepare(wr, &b)
		if err != nil {
			break
		}
		if n == 0 {
			// Counted from the first operation that is posted, so a
			// list refused from its start counts nothing and the route
			// stays idle to another poster, which then wakes the
			// watchdog itself.
			b.begun = len(wrs) - i
			idle = r.BeginN(b.begun)
		}
		n++
		b.begun--
		b.add(o, len(wrs)-i)
	}
	b.flush()
	b.giveBack()
	for i, wr := range wrs[:n] {
		r.posted(wr, idle && i == 0)
	}
	return n, err
}

// minListShare is the fewest operations of a list that go to a connection
// of their own: a shorter list goes to one connection whole, and a longer
// one is not cut into shares shorter than this.
const minListShare = 16

// listBatch is the chain PostList builds for one connection.
type listBatch struct {
	r          *route
	cc         *clientConn
	head, tail *chunk
	n, share   int // chunks on the chain; how many cc takes
	fenced     int // the chain's WRITEs and atomics (fence.go)
	// room: chunks of room in flight PostList took for the list and its
	// operations have not used yet (reserve takes from it); begun:
	// operations it counted as posted (BeginN) and has not posted yet.
	room, begun int
}

// giveBack returns the room and the counts of posted operations that
// the list did not use (operations refused, or of several chunks).
func (b *listBatch) giveBack() {
	if b.room > 0 {
		b.r.sem.release(int64(b.room))
		b.room = 0
	}
	if b.begun > 0 {
		b.r.UnbeginN(b.begun)
		b.begun = 0
	}
}

// add queues o's chunk on the chain when o is a single-chunk op off the
// lane; any other op goes through queue, as Post's do (one place for
// whatever must see a write-imm or a send before it is queued), after the
// chain. left is the list's operations from o on.
func (b *listBatch) add(o *op, left int) {
	if len(o.chunks) != 1 || lane(o.wr) {
		b.flush()
		b.r.queue(o)
		return
	}
	if b.cc != nil && b.n >= b.share {
		b.flush()
	}
	if b.cc == nil {
		b.start(left)
	}
	c := &o.chunks[0]
	if b.tail == nil {
		b.head = c
	} else {
		b.tail.next = c
	}
	b.tail = c
	b.n++
	if fenced(o) {
		b.fenced++ // fence.go: counted (at flush) before it is queued
	}
}

// start picks the connection of the next chain, for left operations: the
// least loaded (ties taken round-robin), which takes them all, or, for
// left of 2×minListShare or more, its share of evening the loads (at least
// minListShare, and all when fewer than minListShare would be left). The
// loads are read without the connections' locks: a hint, never a
// correctness matter.
func (b *listBatch) start(left int) {
	conns := b.r.conns
	nc := len(conns)
	first := int(b.r.next.Add(1))
	best, least, sum := 0, 0, 0
	for j := range nc {
		i := (first + j) % nc
		l := int(conns[i].slots.held.Load())
		sum += l
		if j == 0 || l < least {
			best, least = i, l
		}
	}
	b.cc, b.n, b.share = conns[best], 0, left
	if nc < 2 || left < 2*minListShare {
		return
	}
	level := (sum + left + nc - 1) / nc
	if share := max(minListShare, level-least); left-share >= minListShare {
		b.share = share
	}
}

// flush queues the chain built so far on its connection.
func (b *listBatch) flush() {
	if b.head != nil {
		if b.fenced > 0 {
			b.r.fenceCountChain(b.head, b.fenced) // fence.go: one lock for the chain
		}
		b.cc.enqueue(b.head, true)
	}
	b.head, b.tail, b.cc, b.fenced = nil, nil, nil, 0
}
