//go:build ibverbs

package ibverbs

import (
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
)

// The completion-queue poller and the async-event listener: the two
// goroutines that hear from the device.

// pollBatch is the number of completions one cgo call polls at most.
const pollBatch = 64

// spinPolls is how many polls the spin makes between two clock reads.
const spinPolls = 8

// poller owns the completion queue: it polls in batches and sleeps on the
// completion channel when the queue is empty. It returns when Close wakes
// it, after every route has drained.
func (b *Backend) poller() {
	defer b.wg.Done()
	buf := newWCBuf(pollBatch)
	b.batch = make([]done, 0, pollBatch)
	for {
		n, err := b.res.poll(buf)
		if err != nil {
			b.log.Error("poll completion queue", "err", err)
			b.failAll(fmt.Errorf("ibverbs: completion queue failed: %w", rdmamgr.ErrClosed))
		}
		b.completeAll(buf, n)
		if n == pollBatch {
			continue
		}
		// Spin while work is in flight, after completions too, so that a
		// trickle of completions does not sleep after each. Not when
		// idle: in the
		// Soft-RoCE VM a poller spinning for the next one-at-a-time
		// operation takes the CPU its post needs (latency-bench.sh).
		if b.spin(buf) {
			continue
		}
		if b.rearm(buf) {
			continue
		}
		if !b.sleep() {
			return // woken for shutdown; every route has drained
		}
		b.coarse.Store(time.Now().UnixNano())
	}
}

// completeAll dispatches the first n completions of buf: control work
// one by one (recv.go), the operations' as one batch whose chunks come out
// of the slot table under one lock.
func (b *Backend) completeAll(buf wcBuf, n int) {
	if n == 0 {
		return
	}
	ds := b.slots.takeBatch(buf, n, b.batch[:0])
	if len(ds) < n {
		for i := range n {
			w := buf.at(i)
			if w.wrID&ctlBit != 0 {
				b.ctlComplete(w)
			}
		}
	}
	if len(ds) > 0 {
		b.completeBatch(ds)
	}
	clear(ds)
}

// spin polls for up to Config.Spin while work is in flight, before the
// poller pays for a completion event and a wake-up (perftest spins all the
// time). It reports whether it found completions.
func (b *Backend) spin(buf wcBuf) bool {
	if b.cfg.Spin <= 0 || !b.slots.busy() {
		return false
	}
	n := 0
	now := time.Now()
	until := now.Add(b.cfg.Spin)
	for n == 0 && now.Before(until) {
		for range spinPolls {
			if n, _ = b.res.poll(buf); n > 0 {
				break
			}
		}
		now = time.Now()
	}
	b.coarse.Store(now.UnixNano())
	b.completeAll(buf, n)
	return n > 0
}

// rearm requests the next completion event and polls once more:
// completions that arrived before the arm raise no event. It reports
// whether it found completions.
func (b *Backend) rearm(buf wcBuf) bool {
	if err := b.res.arm(); err != nil {
		b.log.Error("arm completion queue", "err", err)
	}
	n, _ := b.res.poll(buf)
	b.completeAll(buf, n)
	return n > 0
}

// sleep waits for a completion event; it returns false once woken for
// shutdown.
func (b *Backend) sleep() bool {
	ok, err := b.res.waitCQ(int(b.wake))
	if err != nil {
		b.log.Error("wait for completions", "err", err)
		select {
		case <-b.stop:
			return false
		case <-time.After(10 * time.Millisecond):
		}
		return true
	}
	return ok
}

// asyncLoop logs asynchronous events and fails the routes they concern.
func (b *Backend) asyncLoop() {
	defer b.wg.Done()
	for {
		ev, ok, err := b.dev.waitAsync(int(b.wake))
		if err != nil {
			b.log.Error("wait for async events", "err", err)
			select {
			case <-b.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if !ok {
			return
		}
		b.asyncEvent(ev)
	}
}

func (b *Backend) asyncEvent(ev asyncEvent) {
	name := eventTypeStr(ev.typ)
	switch ev.typ {
	case evQPFatal, evQPReqErr, evQPAccessErr, evPathMigErr:
		b.mu.Lock()
		r := b.byQPN[ev.qpn]
		b.mu.Unlock()
		b.log.Warn("queue pair error event", "event", name, "qp", ev.qpn, "known", r != nil)
		if r != nil {
			r.fail(fmt.Errorf("ibverbs: queue pair %d: async event %q: %w", ev.qpn, name, rdmamgr.ErrProtocol))
		}
	case evCQErr, evDeviceFatal:
		b.log.Error("fatal async event", "event", name)
		b.failAll(fmt.Errorf("ibverbs: async event %q: %w", name, rdmamgr.ErrClosed))
	case evPortErr:
		b.log.Warn("port error", "event", name, "port", ev.port)
	case evCommEst, evLastWQEReached:
		b.log.Debug("async event", "event", name, "qp", ev.qpn)
	default:
		b.log.Info("async event", "event", name, "qp", ev.qpn, "port", ev.port)
	}
}
