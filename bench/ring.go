package bench

import (
	"context"
	"time"

	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// ringSlot is one slot of the ring: its work request (reused) and its
// part of the buffers.
type ringSlot struct {
	wr    queuepair.WorkRequest
	l, r  buffer.Buffer
	off   uint64
	t0    time.Time
	armed bool
}

// ring runs operations from one goroutine with cfg.Concurrency in flight:
// it posts one on every slot, then waits for the oldest, counts it and
// posts the next on its slot, until the tickets run out or the run stops.
// A program pipelines this way: it waits only when the oldest operation is
// not done yet, so completions cost it no wake-up of its own.
func (b *benchRun) ring(ctx context.Context, limit int64) {
	cfg := b.cfg
	slots := make([]ringSlot, cfg.Concurrency)
	for i := range slots {
		s := &slots[i]
		s.off = uint64(i) * cfg.Size
		s.l, _ = b.local.Slice(s.off, cfg.Size)
		s.r, _ = b.remote.Slice(s.off, cfg.Size)
	}
	// now is when the last operation was seen complete: the next one on
	// its slot is posted right after, so one clock read serves both.
	post := func(i int, now time.Time) bool {
		if ctx.Err() != nil {
			return false
		}
		seq := b.next.Add(1) - 1
		if seq >= limit {
			return false
		}
		s := &slots[i]
		if cfg.Verify {
			b.prepareSlot(s.off, uint64(seq))
		}
		s.t0, s.armed = now, true
		if cfg.Op == "put" {
			b.qp.PostPut(ctx, &s.wr, s.l, s.r)
		} else {
			b.qp.PostGet(ctx, &s.wr, s.l, s.r)
		}
		return true
	}
	for i := range slots {
		if !post(i, time.Now()) {
			break
		}
	}
	for i := 0; ; i = (i + 1) % len(slots) {
		s := &slots[i]
		if !s.armed {
			if b.idle(slots) {
				return
			}
			continue
		}
		err := s.wr.Wait(ctx)
		s.armed = false
		now := time.Now()
		b.done(ctx, i, s.off, now.Sub(s.t0), err)
		if cfg.Verify { // done read the operation back meanwhile
			now = time.Now()
		}
		post(i, now)
	}
}

// idle reports whether no slot has an operation in flight.
func (b *benchRun) idle(slots []ringSlot) bool {
	for i := range slots {
		if slots[i].armed {
			return false
		}
	}
	return true
}
