package queuepair

import "time"

// observe reports w's outcome to q's observer, if any.
func (q *QueuePair) observe(w *WorkRequest, err error) {
	if q == nil || q.obs == nil || w.start.IsZero() {
		return
	}
	q.obs.Observe(q.kind, w.wr.Op, w.wr.Remote.Length, time.Since(w.start), err)
}
