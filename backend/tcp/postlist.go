package tcp

import (
	"github.com/rdmamgr/rdmamgr/backend"
)

var _ backend.ListPoster = (*route)(nil)

// PostList implements backend.ListPoster: it posts wrs in order as Post
// does, but queues consecutive single-chunk operations as one chain on one
// connection (one lock, one wake-up of its writer), the lane's operations
// on the lane. An operation of several chunks, one for another
// connection, or a wait for room in flight first queues the chain built
// so far, so each connection still sees the list in posting order.
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

// add queues o's chunks: on the chain when they go on one connection,
// else (striped) at once, after the chain.
func (b *listBatch) add(o *op) {
	r := b.r
	var cc *clientConn
	switch {
	case lane(o.wr):
		cc = r.conns[0]
	case len(o.chunks) == 1:
		cc = b.cc
		if cc == nil {
			cc = r.conns[int(r.next.Add(1))%len(r.conns)]
		}
	default:
		b.flush()
		r.queue(o)
		return
	}
	if cc != b.cc {
		b.flush()
		b.cc = cc
	}
	for i := range o.chunks {
		c := &o.chunks[i]
		if b.tail == nil {
			b.head = c
		} else {
			b.tail.next = c
		}
		b.tail = c
	}
}

// flush queues the chain built so far on its connection.
func (b *listBatch) flush() {
	if b.head != nil {
		b.cc.enqueue(b.head)
	}
	b.head, b.tail = nil, nil
}
