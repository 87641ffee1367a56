package bench

import (
	"context"
	"time"

	"github.com/rdmamgr/rdmamgr/queuepair"
)

// ringSlot is one slot of the ring: its work request (reused) and its
// part of the buffers.
type ringSlot struct {
	wr    queuepair.WorkRequest
	off   uint64
	t0    time.Duration // since the ring's base: one word, not a time.Time
	armed bool
	// failed (chainRing): its operation, unsignaled, failed and was
	// reaped (and counted); the signal that vouches for it re-posts it.
	failed bool
}

// ringSlots builds the ring's n slots and, once, every slot's request
// and operation (its ID the slot's index plus 1: 0 is a read-back of
// done's).
func (b *benchRun) ringSlots(n int) ([]ringSlot, []*queuepair.WorkRequest, []queuepair.Op) {
	cfg := b.cfg
	slots := make([]ringSlot, n)
	allWrs := make([]*queuepair.WorkRequest, n)
	allOps := make([]queuepair.Op, n)
	for i := range slots {
		s := &slots[i]
		if !cfg.SharedSlot {
			s.off = uint64(i) * cfg.Size
		}
		l, _ := b.local.Slice(s.off, cfg.Size)
		r, _ := b.remote.Slice(s.off, cfg.Size)
		allOps[i] = queuepair.GetOp(l, r)
		if cfg.Op == "put" {
			allOps[i] = queuepair.PutOp(l, r)
		}
		allOps[i].ID = uint64(i) + 1
		allWrs[i] = &s.wr
	}
	return slots, allWrs, allOps
}

// ring runs operations from one goroutine with cfg.Concurrency in flight
// through a completion queue, as a verbs program does: it posts one on
// every slot as one chain (a Chain prepared once, PrepareOps, posted
// whole or by runs of slots in order; PostOps for others: one doorbell
// each), then reaps what
// finished in batches (cq.Wait), counts each and posts the next on every
// reaped slot as the next chain, until the tickets run out or the run
// stops. With cfg.SignalEvery above 1 it is chainRing.
func (b *benchRun) ring(ctx context.Context, limit int64) {
	cfg := b.cfg
	if cfg.SignalEvery > 1 {
		b.chainRing(ctx, limit)
		return
	}
	n := cfg.Concurrency
	// A chain of slots lo..hi in order (what a route that completes in
	// order reaps) is posted as the prepared chain's lo..hi (PrepareOps:
	// the handles checked once), as a verbs program re-posts its array of
	// work requests; another is gathered into wrs and ops (PostOps).
	slots, allWrs, allOps := b.ringSlots(n)
	pc := b.qp.PrepareOps(allWrs, allOps) // the in-order chains: handles checked once
	// Room for every slot's operation and, with Verify, as many read-backs
	// (done's, reaped and skipped here).
	cq := queuepair.NewCompletionQueue(2*n + 1)
	b.qp.SetCompletionQueue(cq)
	defer b.qp.SetCompletionQueue(nil)
	idx := make([]int, 0, n) // the slots of the next chain
	wrs := make([]*queuepair.WorkRequest, 0, n)
	ops := make([]queuepair.Op, 0, n)
	out := make([]*queuepair.WorkRequest, cq.Cap())
	armed := 0
	var issued int64 // tickets: the ring is the phase's only poster
	// add puts slot i's next operation on the chain; now is when the last
	// operation was seen complete, so one clock read serves both. The
	// run's end is read once per batch (stopped), not per operation.
	stopped := false
	base := time.Now()
	lat := b.latencies[0] // latencies[0]: the ring's one slice, in a local while the ring runs
	defer func() { b.latencies[0] = lat }()
	add := func(i int, now time.Duration) {
		if stopped {
			return
		}
		seq := issued
		if seq >= limit {
			return
		}
		issued++
		s := &slots[i]
		if cfg.Verify {
			b.prepareSlot(s.off, uint64(seq))
		}
		s.t0, s.armed = now, true
		armed++
		idx = append(idx, i)
	}
	post := func() {
		if len(idx) == 0 {
			return
		}
		lo, inOrder := idx[0], true
		for j, i := range idx {
			inOrder = inOrder && i == lo+j
		}
		if inOrder {
			pc.Post(ctx, lo, lo+len(idx))
			idx = idx[:0]
			return
		}
		for _, i := range idx {
			wrs, ops = append(wrs, allWrs[i]), append(ops, allOps[i])
		}
		b.qp.PostOps(ctx, wrs, ops)
		clear(wrs)
		clear(ops)
		wrs, ops, idx = wrs[:0], ops[:0], idx[:0]
	}
	now := time.Since(base)
	for i := range slots {
		add(i, now)
	}
	post()
	for armed > 0 {
		k, err := cq.Wait(ctx, out)
		if err != nil {
			// The run stopped: Wait cancels each operation still in
			// flight and returns once it no longer touches the buffers.
			for i := range slots {
				if slots[i].armed {
					_ = slots[i].wr.Wait(ctx)
					slots[i].armed = false
				}
			}
			return
		}
		now := time.Since(base)
		stopped = ctx.Err() != nil
		var ok uint64
		reaped := out[:k]
		if !stopped && !cfg.Verify { // the common case, in a loop that calls nothing
			var j int
			j, lat, idx = reapRing(reaped, slots, lat, idx, now, limit-issued)
			issued += int64(j)
			ok += uint64(j)
			reaped = reaped[j:]
		}
		for _, w := range reaped {
			if w.ID() == 0 || int(w.ID()) > len(slots) || &slots[w.ID()-1].wr != w {
				continue // a read-back of done's
			}
			i := int(w.ID()) - 1
			s := &slots[i]
			s.armed = false
			armed--
			if err := w.Err(); err == nil && !cfg.Verify { // done's common case, inline
				lat = append(lat, now-s.t0)
				ok++
			} else {
				b.latencies[0] = lat
				if b.done(ctx, 0, s.off, now-s.t0, err) {
					ok++
				}
				lat = b.latencies[0]
			}
			if cfg.Verify { // done read the operation back meanwhile
				now = time.Since(base)
			}
			// add, inline in its common case (no Verify, tickets left).
			if !stopped && issued < limit && !cfg.Verify {
				issued++
				s.t0, s.armed = now, true
				armed++
				idx = append(idx, i)
			} else {
				add(i, now)
			}
		}
		b.ops.Add(ok)
		clear(out[:k])
		post()
	}
}

// reapRing is ring's common case for the reaped requests out (the run not
// stopped, no Verify): while each is a slot's request that succeeded and
// tickets are left, it records its latency in lat, re-arms its slot at now
// and adds it to idx, the next chain. It returns how many of out it took
// and lat and idx grown; ring takes the rest (a read-back, a failure, the
// last tickets) one by one.
func reapRing(out []*queuepair.WorkRequest, slots []ringSlot, lat []time.Duration, idx []int, now time.Duration, tickets int64) (int, []time.Duration, []int) {
	n := int(min(int64(len(out)), tickets))
	l0, i0 := len(lat), len(idx)
	if cap(lat)-l0 < n || cap(idx)-i0 < n { // no room to write in place: ring appends
		return 0, lat, idx
	}
	ls, is := lat[l0:l0+n], idx[i0:i0+n]
	for j, w := range out[:n] {
		id := w.ID() - 1
		if id >= uint64(len(slots)) || &slots[id].wr != w || w.Err() != nil {
			return j, lat[:l0+j], idx[:i0+j]
		}
		s := &slots[id]
		ls[j] = now - s.t0
		s.t0 = now // armed still: re-posted in the next chain
		is[j] = int(id)
	}
	return n, lat[:l0+n], idx[:i0+n]
}
