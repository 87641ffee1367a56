//go:build ibverbs

package ibverbs

import (
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
)

// watchdog fails routes whose work missed its deadline and sends
// keep-alive probes on idle queue pairs. It sleeps while there is nothing
// to watch.
func (b *Backend) watchdog() {
	defer b.wg.Done()
	var routes []*route
	for {
		b.mu.Lock()
		routes = routes[:0]
		for r := range b.routes {
			routes = append(routes, r)
		}
		b.mu.Unlock()
		busy := false
		now := time.Now()
		b.coarse.Store(now.UnixNano())
		for _, r := range routes {
			if r.InFlight() > 0 {
				busy = true
				r.expire(now)
			}
			if b.cfg.KeepAlive > 0 {
				r.keepAlive(now, b.cfg.KeepAlive)
			}
		}
		var wait <-chan time.Time
		switch {
		case busy:
			wait = time.After(b.cfg.WatchdogInterval)
		case len(routes) > 0 && b.cfg.KeepAlive > 0:
			wait = time.After(b.cfg.KeepAlive / 4)
		}
		select {
		case <-b.stop:
			return
		case <-b.kick:
		case <-wait:
		}
	}
}

// expire marks operations past their deadline: they complete with
// ErrDeadline once the device is done with them. An RC queue pair cannot
// take one work request back, and moving it to the error state would fail
// every neighbour on the route, so the device finishes what it was given:
// the queue pair's transport timeouts (AckTimeout × RetryCount) bound
// that, and a work request that fails them fails the route with
// ErrPeerGone. Only an operation still held DrainTimeout past its deadline,
// a device that ignores its own timeouts, fails the route here.
func (r *route) expire(now time.Time) {
	stuck := false
	r.table.each(func(o *op) {
		d := o.wr.Deadline
		if d.IsZero() || !now.After(d) {
			return
		}
		o.expired.Store(true)
		if now.Sub(d) > r.b.cfg.DrainTimeout {
			stuck = true
		}
	})
	if stuck {
		r.fail(fmt.Errorf("ibverbs: route failed: a request is held %v past its deadline: %w", r.b.cfg.DrainTimeout, rdmamgr.ErrPeerGone))
	}
}

// keepAlive probes the peer with a zero-length RDMA WRITE when the queue
// pair has been idle for d; a failed probe fails the route (a dead peer:
// rdmamgr.ErrPeerGone).
func (r *route) keepAlive(now time.Time, d time.Duration) {
	if r.outstanding.Load() > 0 || r.probing.Load() || now.UnixNano()-r.lastActive.Load() < int64(d) {
		return
	}
	if !r.b.cqBudget.tryAcquire(1) {
		return
	}
	r.postMu.Lock()
	if r.failing {
		r.postMu.Unlock()
		r.b.cqBudget.release(1)
		return
	}
	r.probing.Store(true)
	r.outstanding.Add(1)
	r.lastActive.Store(now.UnixNano())
	id := r.b.slots.alloc(&chunk{r: r})
	err := r.qp.postProbe(id)
	r.postMu.Unlock()
	if err != nil {
		r.b.slots.take(id)
		r.b.cqBudget.release(1)
		r.probing.Store(false)
		r.wrDone(1)
		r.fail(fmt.Errorf("ibverbs: keep-alive: %w: %w", err, rdmamgr.ErrClosed))
	}
}
