//go:build ibverbs

package ibverbs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/rdmamgr/rdmamgr/backend"
)

// Route setup: queue pairs created, exchanged and connected through the
// managers' handshake (PrepareRoute, AcceptRoute, Complete).

// newQP creates a queue pair in INIT, counting it against MaxRoutes.
func (b *Backend) newQP() (*queuePair, error) {
	b.mu.Lock()
	if b.nqp >= b.cfg.MaxRoutes {
		n := b.nqp
		b.mu.Unlock()
		return nil, fmt.Errorf("ibverbs: %d queue pairs: %w", n, backend.ErrLimit)
	}
	b.nqp++
	b.mu.Unlock()
	qp, err := b.res.createQP(b.inflight + 1)
	if err == nil {
		if err = qp.toInit(b.port); err != nil {
			qp.destroy()
		}
	}
	if err != nil {
		b.mu.Lock()
		b.nqp--
		b.mu.Unlock()
		return nil, err
	}
	return qp, nil
}

func (b *Backend) dropQP(qp *queuePair) {
	if err := qp.destroy(); err != nil {
		b.log.Warn("destroy queue pair", "err", err)
	}
	b.mu.Lock()
	b.nqp--
	b.mu.Unlock()
}

func randomPSN() (uint32, error) {
	var p [4]byte
	if _, err := rand.Read(p[:]); err != nil {
		return 0, fmt.Errorf("ibverbs: psn: %w", err)
	}
	return binary.BigEndian.Uint32(p[:]) & 0xFFFFFF, nil
}

func (b *Backend) localInfo(qp *queuePair, psn uint32) []byte {
	ri := routeInfo{mtu: uint8(b.mtu), rdAtom: uint8(b.rdAtom), qpn: qp.qpn, psn: psn, lid: b.lid, gid: b.gid}
	return ri.encode()
}

// connect moves qp from INIT to RTS towards the peer.
func (b *Backend) connect(qp *queuePair, psn uint32, peer routeInfo) error {
	if err := peer.checkAddress(b.ethernet); err != nil {
		return err
	}
	mtu := min(b.mtu, int(peer.mtu))
	if err := qp.toRTR(rtrAttr{port: b.port, mtu: mtu, sgidIndex: b.gidIndex, maxDestRd: b.rdAtom,
		global: b.ethernet, peer: peer}); err != nil {
		return err
	}
	return qp.toRTS(psn, b.cfg.AckTimeout, b.cfg.RetryCount, min(b.initRd, int(peer.rdAtom)))
}

// PrepareRoute creates an RC queue pair in INIT and returns its info.
func (b *Backend) PrepareRoute(ctx context.Context, peerID uint64) (backend.PendingRoute, []byte, error) {
	b.life.RLock()
	defer b.life.RUnlock()
	if err := b.alive(); err != nil {
		return nil, nil, err
	}
	psn, err := randomPSN()
	if err != nil {
		return nil, nil, err
	}
	qp, err := b.newQP()
	if err != nil {
		return nil, nil, err
	}
	p := &pendingRoute{b: b, peer: peerID, qp: qp, psn: psn}
	b.mu.Lock()
	b.pending[p] = struct{}{}
	b.mu.Unlock()
	return p, b.localInfo(qp, psn), nil
}

// AcceptRoute validates the initiator's info, creates our queue pair,
// moves it to RTS and returns its info. The accepted queue pair lives until
// it fails (a keep-alive probe finds the peer gone) or the backend closes.
func (b *Backend) AcceptRoute(ctx context.Context, peerID uint64, info []byte) ([]byte, error) {
	peer, err := decodeRouteInfo(info)
	if err != nil {
		return nil, err
	}
	b.life.RLock()
	defer b.life.RUnlock()
	if err := b.alive(); err != nil {
		return nil, err
	}
	if err := peer.checkAddress(b.ethernet); err != nil {
		return nil, err
	}
	psn, err := randomPSN()
	if err != nil {
		return nil, err
	}
	qp, err := b.newQP()
	if err != nil {
		return nil, err
	}
	if err := b.connect(qp, psn, peer); err != nil {
		b.dropQP(qp)
		return nil, err
	}
	b.addRoute(newRoute(b, peerID, qp, true))
	return b.localInfo(qp, psn), nil
}

func (b *Backend) addRoute(r *route) {
	b.mu.Lock()
	b.routes[r] = struct{}{}
	b.byQPN[r.qp.qpn] = r
	b.mu.Unlock()
	b.kickWatchdog()
}

// pendingRoute is the initiator's queue pair between PrepareRoute and
// Complete.
type pendingRoute struct {
	b    *Backend
	peer uint64
	psn  uint32

	mu sync.Mutex
	qp *queuePair // nil once completed or aborted
}

// Complete moves the queue pair RTR -> RTS towards the responder. On
// failure the queue pair is destroyed (Abort is then a no-op).
func (p *pendingRoute) Complete(ctx context.Context, peerInfo []byte) (backend.Route, error) {
	b := p.b
	b.life.RLock()
	defer b.life.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	qp := p.qp
	if qp == nil {
		return nil, fmt.Errorf("ibverbs: route already completed or aborted: %w", backend.ErrClosed)
	}
	if err := b.alive(); err != nil {
		return nil, err
	}
	p.qp = nil
	b.mu.Lock()
	delete(b.pending, p)
	b.mu.Unlock()
	peer, err := decodeRouteInfo(peerInfo)
	if err == nil {
		err = b.connect(qp, p.psn, peer)
	}
	if err != nil {
		b.dropQP(qp)
		return nil, err
	}
	r := newRoute(b, p.peer, qp, false)
	b.addRoute(r)
	return r, nil
}

// Abort destroys the queue pair. Idempotent.
func (p *pendingRoute) Abort() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.qp == nil {
		return
	}
	p.b.mu.Lock()
	delete(p.b.pending, p)
	p.b.mu.Unlock()
	p.b.dropQP(p.qp)
	p.qp = nil
}
