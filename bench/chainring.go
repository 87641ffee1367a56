package bench

import (
	"context"
	"time"

	"github.com/rdmamgr/rdmamgr/queuepair"
)

// chainRing is ring with selective signaling (cfg.SignalEvery = m above
// 1), as perftest's --cq-mod m: the Concurrency slots form chains of m
// (the last one shorter), each chain's last operation signaled and the
// others unsignaled (queuepair.Op.Unsignaled). A chain is posted whole
// (PostOps: one doorbell), and the chains reaped together are posted
// again together, each run of neighbours as one chain: the signal of a
// chain, reaped, vouches for every operation of it (the queue hands a
// signal over only once everything posted before it on the queue pair is
// done), and the ring counts them and posts the chain again. An
// unsignaled operation that fails is reaped on its own: counted then,
// re-posted with its chain.
func (b *benchRun) chainRing(ctx context.Context, limit int64) {
	cfg := b.cfg
	n, m := cfg.Concurrency, cfg.SignalEvery
	slots, allWrs, allOps := b.ringSlots(n)
	for i := range allOps {
		allOps[i].Unsignaled = i%m != m-1 && i != n-1
	}
	nc := (n + m - 1) / m
	posted := make([]int, nc) // how many of chain c's operations are in flight (0: none)
	t0 := make([]time.Duration, nc)
	cq := queuepair.NewCompletionQueue(2*n + 1) // with Verify, room for as many read-backs
	b.qp.SetCompletionQueue(cq)
	defer b.qp.SetCompletionQueue(nil)
	out := make([]*queuepair.WorkRequest, cq.Cap())
	armed := 0
	var issued int64 // tickets: the ring is the phase's only poster
	stopped := false
	base := time.Now()
	lat := b.latencies[0]
	defer func() { b.latencies[0] = lat }()
	// arm readies chain c to be posted again, cut short (its last
	// operation signaled) when fewer tickets are left than it has
	// operations; false: no ticket left (or the run stopped).
	arm := func(c int, now time.Duration) bool {
		lo := c * m
		k := int64(min(m, n-lo))
		if left := limit - issued; left < k {
			k = left
		}
		if stopped || k <= 0 {
			return false
		}
		if k < int64(min(m, n-lo)) {
			allOps[lo+int(k)-1].Unsignaled = false // the run's last: nothing follows it
		}
		if cfg.Verify {
			for j := lo; j < lo+int(k); j++ {
				b.prepareSlot(slots[j].off, uint64(issued)+uint64(j-lo))
			}
		}
		issued += k
		posted[c], t0[c] = int(k), now
		armed += int(k)
		return true
	}
	// post posts the armed chains of again, each run of neighbours whole
	// (up to a chain cut short) as one chain.
	again := make([]bool, nc)
	post := func() {
		for c := 0; c < nc; {
			if !again[c] {
				c++
				continue
			}
			lo, hi := c*m, c*m+posted[c]
			again[c] = false
			for c++; c < nc && again[c] && hi == c*m; c++ {
				hi += posted[c]
				again[c] = false
			}
			b.qp.PostOps(ctx, allWrs[lo:hi], allOps[lo:hi])
		}
	}
	for c := range nc {
		again[c] = arm(c, 0)
	}
	post()
	for armed > 0 {
		k, err := cq.Wait(ctx, out)
		if err != nil {
			// The run stopped: Wait cancels each operation still in
			// flight and returns once it no longer touches the buffers.
			for c, p := range posted {
				for _, w := range allWrs[c*m : c*m+p] {
					_ = w.Wait(ctx)
				}
			}
			return
		}
		now := time.Since(base)
		stopped = ctx.Err() != nil
		var ok uint64
		for _, w := range out[:k] {
			if w.ID() == 0 || int(w.ID()) > n || allWrs[w.ID()-1] != w {
				continue // a read-back of done's
			}
			i := int(w.ID()) - 1
			c := i / m
			if allOps[i].Unsignaled { // it failed: counted now, re-posted with its chain
				b.latencies[0] = lat
				b.done(ctx, 0, slots[i].off, now-t0[c], w.Err())
				lat = b.latencies[0]
				slots[i].failed = true
				continue
			}
			lo := c * m
			for j := lo; j < lo+posted[c]; j++ {
				s := &slots[j]
				if s.failed { // counted when its failure was reaped
					s.failed = false
				} else if err := s.wr.Err(); err == nil && !cfg.Verify {
					lat = append(lat, now-t0[c])
					ok++
				} else {
					b.latencies[0] = lat
					if b.done(ctx, 0, s.off, now-t0[c], err) {
						ok++
					}
					lat = b.latencies[0]
				}
			}
			armed -= posted[c]
			posted[c] = 0
			if cfg.Verify { // done read the operations back meanwhile
				now = time.Since(base)
			}
			again[c] = arm(c, now)
		}
		b.ops.Add(ok)
		clear(out[:k])
		post()
	}
}
