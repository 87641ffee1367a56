//go:build ibverbs

package ibverbs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
)

// Route setup: queue pairs created, exchanged and connected through the
// managers' handshake (PrepareRoute, AcceptRoute, Complete).

// newQP creates a queue pair in INIT, counting it against MaxRoutes, with
// its ring (ring.go) posted: an initiator's ring receives acks and its
// cells serve its notices, Sends and atomics; an accepted one receives
// notices and Sends and its cells serve its acks. The ring's receives, and
// an accepted queue pair's acks, have completion-queue entries reserved.
func (b *Backend) newQP(accepted bool) (*queuePair, *ring, error) {
	b.mu.Lock()
	if b.nqp >= b.cfg.MaxRoutes {
		n := b.nqp
		b.mu.Unlock()
		return nil, nil, fmt.Errorf("ibverbs: %d queue pairs: %w", n, rdmamgr.ErrLimit)
	}
	b.nqp++
	b.mu.Unlock()
	qp, g, err := b.makeQP(accepted)
	if err != nil {
		b.mu.Lock()
		b.nqp--
		b.mu.Unlock()
		return nil, nil, err
	}
	return qp, g, nil
}

func (b *Backend) makeQP(accepted bool) (qp *queuePair, g *ring, err error) {
	// ctlReserve more slots than credits (RecvSlots): the owner's
	// invalidates and goodbye and the initiator's invalidate acks, which
	// take no credit (via_inval.go); the initiator's acks need cells (and
	// completion-queue entries) of their own too.
	slots := b.cfg.RecvSlots + ctlReserve
	slotSize, cells, cqRes := cellSize, b.inflight+ctlReserve, slots+ctlReserve
	if accepted {
		slotSize, cells, cqRes = ctlSendViaHeader+max(b.cfg.MaxSend, ctlNoticeViaSize), slots, 2*slots
	}
	if b.cqBudget.acquire(cqRes, time.Now().Add(time.Second), nil, nil) != semOK {
		return nil, nil, fmt.Errorf("ibverbs: no room on the completion queue for %d more entries: %w", cqRes, rdmamgr.ErrLimit)
	}
	defer func() {
		if err != nil {
			b.cqBudget.release(cqRes)
		}
	}()
	if g, err = b.newRing(slots, slotSize, cells); err != nil {
		return nil, nil, err
	}
	g.cqRes = cqRes
	qp, err = b.res.createQP(b.inflight+1+slots, slots)
	if err == nil {
		if err = qp.toInit(b.port, b.atomics); err == nil {
			err = g.postRecvs(qp)
		}
		if err != nil {
			qp.destroy()
		}
	}
	if err != nil {
		g.release()
		return nil, nil, err
	}
	return qp, g, nil
}

// dropQP destroys qp and then frees its ring, or, unless safe (the device
// may still complete work that reads a cell), keeps it until Close.
func (b *Backend) dropQP(qp *queuePair, g *ring, safe bool) {
	if err := qp.destroy(); err != nil {
		b.log.Warn("destroy queue pair", "err", err)
	}
	b.cqBudget.release(g.cqRes)
	b.mu.Lock()
	b.nqp--
	if !safe {
		b.leaked = append(b.leaked, g)
	}
	b.mu.Unlock()
	if safe {
		if err := g.release(); err != nil {
			b.log.Warn("free a queue pair's ring", "err", err)
		}
	}
}

func randomPSN() (uint32, error) {
	var p [4]byte
	if _, err := rand.Read(p[:]); err != nil {
		return 0, fmt.Errorf("ibverbs: psn: %w", err)
	}
	return binary.BigEndian.Uint32(p[:]) & 0xFFFFFF, nil
}

// localInfo is our info for qp; agent says host agent (infoAgent: the
// backend has a resolver); fb is our fallback part (nil: version 2).
func (b *Backend) localInfo(qp *queuePair, psn uint32, agent bool, fb *fallbackInfo) []byte {
	ri := routeInfo{mtu: uint8(b.mtu), rdAtom: uint8(b.rdAtom), qpn: qp.qpn, psn: psn, lid: b.lid, gid: b.gid,
		recvSlots: uint16(b.cfg.RecvSlots), maxSend: uint32(b.cfg.MaxSend), fb: fb}
	if b.atomics {
		ri.flags |= infoAtomics
	}
	if agent {
		ri.flags |= infoAgent
	}
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
	qp, g, err := b.newQP(false)
	if err != nil {
		return nil, nil, err
	}
	p := &pendingRoute{b: b, peer: peerID, qp: qp, ring: g, psn: psn}
	var fb *fallbackInfo
	if f := b.cfg.Fallback; f != nil {
		fpr, fi, err := f.PrepareRoute(ctx, peerID)
		if err != nil {
			b.dropQP(qp, g, true)
			return nil, nil, fmt.Errorf("ibverbs: fallback %s: %w", f.Kind(), err)
		}
		p.fb, fb = fpr, &fallbackInfo{kind: string(f.Kind()), info: fi}
	}
	b.mu.Lock()
	b.pending[p] = struct{}{}
	b.mu.Unlock()
	return p, b.localInfo(qp, psn, b.resolver.Load() != nil, fb), nil
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
	qp, g, err := b.newQP(true)
	if err != nil {
		return nil, err
	}
	if err := b.connect(qp, psn, peer); err != nil {
		b.dropQP(qp, g, true)
		return nil, err
	}
	kind := ""
	if f := b.cfg.Fallback; f != nil {
		kind = string(f.Kind())
	}
	fb, err := fallbackAnswer(peer, kind, func(info []byte) ([]byte, error) {
		return b.cfg.Fallback.AcceptRoute(ctx, peerID, info)
	})
	if err != nil {
		b.dropQP(qp, g, true)
		return nil, fmt.Errorf("ibverbs: fallback %s: %w", kind, err)
	}
	r := newRoute(b, peerID, qp, g, true, peer, nil)
	agent := b.resolver.Load() != nil && b.startWorker(r)
	b.addRoute(r)
	return b.localInfo(qp, psn, agent, fb), nil
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

	mu   sync.Mutex
	qp   *queuePair // nil once completed or aborted
	ring *ring
	fb   backend.PendingRoute // the fallback's half-made route; nil without one, or once taken
}

// Complete completes the fallback's route where the responder answered
// one, then moves the queue pair RTR -> RTS towards the responder. On
// failure the queue pair is destroyed and the fallback's route closed or
// aborted (Abort is then a no-op).
func (p *pendingRoute) Complete(ctx context.Context, peerInfo []byte) (backend.Route, error) {
	peer, derr := decodeRouteInfo(peerInfo)
	// The fallback first, outside life: completing it dials the peer.
	p.mu.Lock()
	fpr, done := p.fb, p.qp == nil
	p.fb = nil
	p.mu.Unlock()
	var fb backend.Route
	switch {
	case fpr == nil:
	case derr != nil || done || peer.fb == nil || peer.fb.kind == "":
		fpr.Abort() // no fallback at the peer (or nothing to complete)
	default:
		var err error
		if fb, err = fpr.Complete(ctx, peer.fb.info); err != nil {
			fpr.Abort()
			p.Abort()
			return nil, fmt.Errorf("ibverbs: fallback route: %w", err)
		}
	}
	r, err := p.complete(peer, derr, fb)
	if err != nil && fb != nil {
		fb.Close()
	}
	return r, err
}

// complete is Complete's queue pair: peer is the responder's info (derr
// its decoding's error), fb the completed fallback route (nil: none),
// which the route owns once it is returned.
func (p *pendingRoute) complete(peer routeInfo, derr error, fb backend.Route) (backend.Route, error) {
	b := p.b
	b.life.RLock()
	defer b.life.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	qp := p.qp
	if qp == nil {
		return nil, fmt.Errorf("ibverbs: route already completed or aborted: %w", rdmamgr.ErrClosed)
	}
	if err := b.alive(); err != nil {
		return nil, err
	}
	p.qp = nil
	b.mu.Lock()
	delete(b.pending, p)
	b.mu.Unlock()
	err := derr
	if err == nil {
		err = b.connect(qp, p.psn, peer)
	}
	if err != nil {
		b.dropQP(qp, p.ring, true)
		return nil, err
	}
	r := newRoute(b, p.peer, qp, p.ring, false, peer, fb)
	b.addRoute(r)
	return r, nil
}

// Abort destroys the queue pair and aborts the fallback's route.
// Idempotent.
func (p *pendingRoute) Abort() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fb != nil {
		p.fb.Abort()
		p.fb = nil
	}
	if p.qp == nil {
		return
	}
	p.b.mu.Lock()
	delete(p.b.pending, p)
	p.b.mu.Unlock()
	p.b.dropQP(p.qp, p.ring, true)
	p.qp = nil
}
