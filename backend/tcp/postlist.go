package tcp

import (
	"github.com/rdmamgr/rdmamgr/backend"
)

var _ backend.ListPoster = (*route)(nil)

// PostList implements backend.ListPoster: it posts wrs in order as Post
// does, but queues consecutive single-chunk operations (not write-imms or
// sends) as one chain on one connection: one lock, one wake-up of its
// writer. An operation of several chunks, a write-imm or send, or a wait
// for room in flight first queues the chain built so far, so each
// connection still sees the list in posting order.
func (r *route) PostList(wrs []*backend.WorkRequest) (int, error) {
	b := listBatch{r: r}
	idle := false
	n := 0
	var err error
	for _, wr := range wrs {
		var o *op
		var wasIdle bool
		o, wasIdle, err = r.prepare(wr, &b)
		if err != nil {
			break
		}
		idle = idle || wasIdle
		n++
		b.add(o)
	}
	b.flush()
	for i, wr := range wrs[:n] {
		r.posted(wr, idle && i == 0)
	}
	return n, err
}

// listBatch is the chain PostList builds for one connection.
type listBatch struct {
	r          *route
	cc         *clientConn
	head, tail *chunk
}

// add queues o's chunk on the chain when o is a single-chunk op off the
// lane; any other op goes through queue, as Post's do (one place for
// whatever must see a write-imm or a send before it is queued), after the
// chain.
func (b *listBatch) add(o *op) {
	if len(o.chunks) != 1 || lane(o.wr) {
		b.flush()
		b.r.queue(o)
		return
	}
	b.r.fenceCount(o) // fence.go: a WRITE or atomic counts before it is queued
	if b.cc == nil {
		b.cc = b.r.conns[int(b.r.next.Add(1))%len(b.r.conns)]
	}
	c := &o.chunks[0]
	if b.tail == nil {
		b.head = c
	} else {
		b.tail.next = c
	}
	b.tail = c
}

// flush queues the chain built so far on its connection.
func (b *listBatch) flush() {
	if b.head != nil {
		b.cc.enqueue(b.head)
	}
	b.head, b.tail = nil, nil
}
