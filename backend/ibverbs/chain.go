//go:build ibverbs

package ibverbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// Posting: Post and PostList prepare operations into a chain (post.go,
// ops.go: checks, room, slots, work requests in C layout) and submit it
// with one ibv_post_send: one cgo call, one doorbell.

var _ backend.ListPoster = (*route)(nil)

// errWouldWait is prepare's answer, without wait, when the room an
// operation needs is not free now.
var errWouldWait = errors.New("ibverbs: no room now")

// chain is the work requests of one ibv_post_send: their C layout, their
// slot ids and the ops they belong to (op.first indexes ids).
type chain struct {
	batch wrBuf
	ids   []uint64
	ops   []*op
	now   int64 // unix nanoseconds of its deadline checks' clock read (0: none yet)
}

var chainPool = sync.Pool{New: func() any { return new(chain) }}

func getChain() *chain { return chainPool.Get().(*chain) }

func putChain(ch *chain) {
	ch.reset()
	chainPool.Put(ch)
}

func (ch *chain) reset() {
	ch.batch = ch.batch[:0]
	ch.ids = ch.ids[:0]
	clear(ch.ops)
	ch.ops = ch.ops[:0]
	ch.now = 0
}

// addOp starts o's work requests at the chain's end.
func (ch *chain) addOp(o *op) {
	o.first = len(ch.ids)
	ch.ops = append(ch.ops, o)
}

// addID records the slot id of the next work request and returns it.
func (ch *chain) addID(id uint64) uint64 {
	ch.ids = append(ch.ids, id)
	return id
}

// idsOf returns the slot ids of o's work requests.
func (ch *chain) idsOf(o *op) []uint64 { return ch.ids[o.first : o.first+len(o.chunks)] }

// PostList implements backend.ListPoster: the operations of wrs go to the
// device as one chain, one ibv_post_send. When the room in flight (the
// queue pair's, the completion queue's, the peer ring's credits) runs out
// part way, what was prepared is posted first and the rest waits for room
// as Post does, so a list longer than MaxInFlight takes several posts. An
// operation for the fallback route (toFallback) is posted there in its
// place in the list, after the ones before it went to the device.
func (r *route) PostList(wrs []*backend.WorkRequest) (int, error) {
	r.ringMu.RLock() // the ring stays while prepare writes its cells (route.ringMu)
	locked := true
	defer func() {
		if locked {
			r.ringMu.RUnlock()
		}
	}()
	ch := getChain()
	defer putChain(ch)
	base := 0 // wrs[:base] are posted; ch holds wrs[base:i]
	for i, wr := range wrs {
		if r.fb != nil && toFallback(wr) {
			// What is prepared goes first (posting order), then wr to
			// the fallback route.
			n, serr := r.submit(ch)
			ch.reset()
			if serr != nil {
				return base + n, serr
			}
			// Not across the fallback's Post, which may wait for room
			// that only the route's teardown (under the lock) frees.
			r.ringMu.RUnlock()
			locked = false
			err := r.postFallback(wr)
			r.ringMu.RLock()
			locked = true
			if err != nil {
				return i, err
			}
			base = i + 1
			continue
		}
		err := r.prepare(wr, ch, false)
		if err == errWouldWait {
			n, serr := r.submit(ch)
			ch.reset()
			if serr != nil {
				return base + n, serr
			}
			base = i
			err = r.prepare(wr, ch, true)
			ch.now = 0 // it may have waited: the next deadline check reads the clock again
		}
		if err != nil {
			n, serr := r.submit(ch)
			if serr != nil {
				return base + n, serr
			}
			return i, err
		}
	}
	n, err := r.submit(ch)
	return base + n, err
}

// submit posts ch, unless the route is failing; its operations' room was
// taken by prepare. It returns how many of ch.ops were posted (those are
// reported) and, if not all, why ch.ops[n] was not. An op awaiting an ack
// gets its sequence number and its place in the queue of acks here, in
// posting order.
func (r *route) submit(ch *chain) (int, error) {
	if len(ch.ops) == 0 {
		return 0, nil
	}
	r.postMu.Lock()
	if r.failing {
		r.postMu.Unlock()
		for _, o := range ch.ops {
			r.unpost(o, ch.idsOf(o))
			r.viaRelease(o.ve)
		}
		return 0, r.Err()
	}
	r.table.add(ch.ops)
	wasIdle, acks := false, 0
	for _, o := range ch.ops {
		if r.Begin() {
			wasIdle = true
		}
		if o.ack {
			o.seq = r.seq
			r.seq++
			binary.BigEndian.PutUint32(r.ring.cell(o.ctlCell)[4:], o.seq)
			acks++
		}
	}
	r.outstanding.Add(int64(len(ch.ids)))
	if acks > 0 {
		r.ackMu.Lock()
		for _, o := range ch.ops {
			if o.ack {
				r.acks = append(r.acks, o)
			}
		}
		r.ackMu.Unlock()
	}
	posted, perr := r.qp.post(ch.batch)
	r.doorbells.Add(1)
	if perr != nil && acks > 0 { // the ops whose control message was not posted get no ack
		drop := 0
		for _, o := range ch.ops {
			if o.ack && o.first+len(o.chunks) > posted {
				drop++
			}
		}
		r.ackMu.Lock()
		r.acks = r.acks[:len(r.acks)-drop]
		r.ackMu.Unlock()
	}
	r.postMu.Unlock()
	if perr != nil {
		return r.chainFailed(ch, posted, perr)
	}
	// A cancel that came while ch was being posted was marked by
	// table.add: nothing here may act on an op's request, which may have
	// completed and been posted again by now.
	if wasIdle { // the watchdog sleeps while every route is idle
		r.b.kickWatchdog()
	}
	return len(ch.ops), nil
}

// unpost gives back what prepare took for o, whose work requests ids were
// never posted.
func (r *route) unpost(o *op, ids []uint64) {
	for _, id := range ids {
		if c := r.b.slots.take(id); c != nil && c.cell != 0 {
			r.ring.freeCell(c.cell - 1)
		}
	}
	r.sem.release(len(ids))
	r.b.cqBudget.release(len(ids))
	if o.ack {
		r.credits.release(1)
	}
}

// chainFailed handles a post of which the device took only the first
// posted work requests of ch: the others were never seen by it. The queue
// pair is in trouble; the route fails so that what was posted is flushed.
// An op with no work request posted fails (it is never reported); one
// with some is reported once they are flushed.
func (r *route) chainFailed(ch *chain, posted int, perr error) (int, error) {
	e := fmt.Errorf("%w: %w", perr, rdmamgr.ErrClosed)
	n := 0
	for _, o := range ch.ops {
		if o.first+len(o.chunks) <= posted {
			n++
			continue
		}
		ids := ch.idsOf(o)
		sent := max(posted-o.first, 0)
		r.unpost(o, ids[sent:])
		if sent == 0 {
			continue
		}
		n++
		o.firstErr.CompareAndSwap(nil, &e)
	}
	r.fail(fmt.Errorf("ibverbs: route failed: %w: %w", perr, rdmamgr.ErrClosed))
	for _, o := range ch.ops[n:] { // posted none of their work requests
		r.viaRelease(o.ve)
		r.table.remove(o)
		r.Unbegin()
		r.wrDone(int64(len(o.chunks)))
	}
	if n > 0 && ch.ops[n-1].first+len(ch.ops[n-1].chunks) > posted { // partly posted
		o := ch.ops[n-1]
		left := o.first + len(o.chunks) - posted
		k := int32(left)
		if o.ack { // its control message is last: it was not posted
			k++
		}
		if o.remaining.Add(-k) == 0 {
			r.finish(o)
		}
		r.wrDone(int64(left))
	}
	if n < len(ch.ops) {
		return n, e
	}
	return n, nil
}
