package actor

import (
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/internal/qpbind"
	"github.com/rdmamgr/rdmamgr/queuepair"
)

// qpEntry is a queue pair the manager built, on one reference to its route.
type qpEntry struct {
	qp    *queuepair.QueuePair
	route *routeEntry
	taken bool // handed to the local caller; guarded by Manager.mu
	made  time.Time
}

// newQueuePair makes a queue pair on a fresh reference to e.
func (m *Manager) newQueuePair(e *routeEntry) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, rdmamgr.ErrClosed
	}
	m.nextQP++
	id := m.nextQP
	qe := &qpEntry{route: e, made: time.Now()}
	qe.qp = queuepair.New(id, e.peerID, e.route, m.reg, qpbind.Options{
		Timeout:   m.cfg.OpTimeout,
		Kind:      e.kind,
		OnRelease: func() { m.releaseQP(id) },
		Observer:  m.observer(),
	})
	m.qps[id] = qe
	return id, nil
}

// takeQueuePair hands the queue pair id to the local caller, once.
func (m *Manager) takeQueuePair(id uint64) (*queuepair.QueuePair, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	qe := m.qps[id]
	if qe == nil || qe.taken {
		return nil, fmt.Errorf("queue pair %d: %w", id, rdmamgr.ErrReleased)
	}
	qe.taken = true
	return qe.qp, nil
}

// releaseQP drops the queue pair and its route reference.
func (m *Manager) releaseQP(id uint64) error {
	m.mu.Lock()
	qe := m.qps[id]
	delete(m.qps, id)
	m.mu.Unlock()
	if qe == nil {
		return fmt.Errorf("queue pair %d: %w", id, rdmamgr.ErrReleased)
	}
	m.dropRef(qe.route)
	return nil
}

// dropUnclaimed releases queue pairs built for a caller that never took
// them (its context ended before the reply arrived) and made before
// cutoff, so they do not hold their route for ever.
func (m *Manager) dropUnclaimed(cutoff time.Time) {
	var ids []uint64
	m.mu.Lock()
	for id, qe := range m.qps {
		if !qe.taken && qe.made.Before(cutoff) {
			ids = append(ids, id)
		}
	}
	m.mu.Unlock()
	for _, id := range ids {
		if m.releaseQP(id) == nil {
			m.log.Info("queue pair never claimed: released", "qp", id)
		}
	}
}
