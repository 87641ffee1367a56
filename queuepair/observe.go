package queuepair

import (
	"time"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Observer sees the outcome of every operation of the queue pairs it is
// given to (Options.Observer), for metrics. Observe runs on the goroutine
// that completes the operation, before the caller learns the outcome: it
// must be quick and must not block.
type Observer interface {
	Observe(kind backend.Kind, op backend.Op, bytes uint64, d time.Duration, err error)
}

// observe reports w's outcome to q's observer, if any.
func (q *QueuePair) observe(w *WorkRequest, err error) {
	if q == nil || q.obs == nil || w.start.IsZero() {
		return
	}
	q.obs.Observe(q.kind, w.wr.Op, w.wr.Remote.Length, time.Since(w.start), err)
}
