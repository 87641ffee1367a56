//go:build ibverbs

package ibverbs

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// Host agents: a proxy's invalidation (see the package doc, "Host
// agents"). Before the far agent deregisters a proxy's remote memory
// region (its revoke or release), it sends an invalidate on every route
// that resolved the proxy and waits, bounded, for each initiator's ack;
// an initiator drops its resolution, lets the operations that hold it
// end, and acks. So a revoke no longer kills a shared route with a
// remote access error. A closing backend says goodbye on its agent
// routes, so that initiators waiting for resolves stop at once.

const (
	// ctlReserve is the receive slots (and the initiator's cells) each
	// queue pair has beyond the credits: an initiator receives at most
	// maxInvalidates invalidates and a goodbye that take no credit, an
	// owner at most maxInvalidates invalidate acks.
	ctlReserve = 4
	// maxInvalidates bounds a route's invalidates not yet acked; the
	// owner waits for room (within its give-up), an initiator that gets
	// more fails the route (rdmamgr.ErrProtocol).
	maxInvalidates = ctlReserve - 1
	// maxResolvers bounds the routes a proxy records as resolvers (dead
	// ones are pruned first); a resolve beyond is refused (ErrLimit).
	maxResolvers = 1024
	// goodbyeWait bounds Close's wait for its goodbyes to be sent.
	goodbyeWait = time.Second
)

// invalidateWait is the owner's give-up on initiators' acks, as shm's
// drain gives up on a stuck copy (a variable for tests).
var invalidateWait = 2 * time.Second

// viaEntry is an initiator's resolution of a (via, region, key): cached
// on the route and held by the operations posted on its rkey.
type viaEntry struct {
	k      viaKey
	res    viaRes
	users  int           // under viaMu: operations that hold it
	cached bool          // under viaMu: in viaCache
	dead   rdmapb.Code   // under viaMu: invalidated (REVOKED, RELEASED); 0: live
	inval  *invalPending // under viaMu: the invalidate waiting for its users
}

// invalPending is an invalidate the initiator acks once the operations
// that held the proxy's rkey have ended.
type invalPending struct {
	seq     uint32
	proxy   uint64
	waiting int // entries with users
}

// invalWait is an invalidate the owner sent and waits to see acked.
type invalWait struct {
	proxy uint64
	done  chan struct{}
}

// holdLocked takes e for an operation, unless it was invalidated: then
// the error says why (the far agent's sentinel). The caller holds viaMu.
func (r *route) holdLocked(e *viaEntry) error {
	if e.dead != 0 {
		return fmt.Errorf("ibverbs: the far agent invalidated its proxy %d of region %d via %d: %w",
			e.res.proxy, e.k.region, e.k.via, backend.Sentinel(e.dead))
	}
	e.users++
	return nil
}

// viaRelease drops an operation's hold of e (nil: none); the last hold
// of an invalidated entry acks the invalidate once no other entry of it
// is held. The caller holds neither viaMu nor postMu.
func (r *route) viaRelease(e *viaEntry) {
	if e == nil {
		return
	}
	var pi *invalPending
	r.viaMu.Lock()
	e.users--
	if e.users == 0 {
		if !e.cached {
			delete(r.viaLive, e)
		}
		if p := e.inval; p != nil {
			e.inval = nil
			if p.waiting--; p.waiting == 0 {
				pi = p
				r.invalPend--
			}
		}
	}
	r.viaMu.Unlock()
	if pi == nil {
		return
	}
	var err error
	r.postMu.Lock()
	if !r.failing {
		err = r.ackLocked(ackMsg{kind: ctlInvalAck, seq: pi.seq, proxy: pi.proxy})
	}
	r.postMu.Unlock()
	if err != nil {
		r.fail(fmt.Errorf("ibverbs: queue pair %d: %w", r.qp.qpn, err))
	}
}

// uncacheLocked takes e out of the cache. The caller holds viaMu.
func (r *route) uncacheLocked(e *viaEntry) {
	if e.cached && r.viaCache[e.k] == e {
		delete(r.viaCache, e.k)
	}
	e.cached = false
	if e.users == 0 {
		delete(r.viaLive, e)
	}
}

// invalidatedLocked handles the owner's invalidate m on the initiator:
// every resolution naming the proxy leaves the cache (later posts resolve
// again, or fail with m's sentinel if they held it already), and the ack
// goes out once the operations holding them have ended - at once if none
// does (also for a proxy this route never resolved: nothing changes).
// The caller holds postMu.
func (r *route) invalidatedLocked(m ctlMsg) error {
	r.viaMu.Lock()
	if r.invalPend+len(r.backlog) >= maxInvalidates {
		r.viaMu.Unlock()
		return fmt.Errorf("ibverbs: more than %d invalidates unacked: %w", maxInvalidates, rdmamgr.ErrProtocol)
	}
	pi := &invalPending{seq: m.seq, proxy: m.region}
	for e := range r.viaLive {
		if e.res.proxy != m.region || e.dead != 0 {
			continue
		}
		e.dead = rdmapb.Code(m.imm)
		r.uncacheLocked(e)
		if e.users > 0 {
			e.inval = pi
			pi.waiting++
		}
	}
	if pi.waiting > 0 {
		r.invalPend++
		r.b.invalHeld.Add(1)
	}
	r.viaMu.Unlock()
	if pi.waiting > 0 {
		return nil
	}
	return r.ackLocked(ackMsg{kind: ctlInvalAck, seq: pi.seq, proxy: pi.proxy})
}

// invalAckedLocked handles an initiator's invalidate ack on the owner: it
// wakes the revoke waiting for it. An ack of nothing this route asked is
// ignored. The caller holds postMu.
func (r *route) invalAckedLocked(m ctlMsg) {
	r.viaMu.Lock()
	w := r.invals[m.seq]
	if w == nil || w.proxy != m.region {
		r.viaMu.Unlock()
		r.b.log.Debug("invalidate ack of nothing asked: ignored", "qp", r.qp.qpn, "seq", m.seq, "proxy", m.region)
		return
	}
	delete(r.invals, m.seq)
	r.viaMu.Unlock()
	close(w.done)
	select {
	case <-r.invalTok:
	default:
	}
}

// addResolver records r as a route that resolved proxy, unless the proxy
// is being invalidated (or gone): then the answer is refused with why.
// The caller holds r.postMu, so the answer goes out before any
// invalidate of proxy on r.
func (b *Backend) addResolver(proxy uint64, r *route) error {
	b.mrMu.Lock()
	defer b.mrMu.Unlock()
	rd := b.mrs[proxy]
	switch {
	case rd == nil:
		return fmt.Errorf("ibverbs: proxy %d is gone: %w", proxy, rdmamgr.ErrReleased)
	case rd.invalWhy != 0:
		return fmt.Errorf("ibverbs: proxy %d is being invalidated: %w", proxy, backend.Sentinel(rd.invalWhy))
	case rd.remote == nil:
		return fmt.Errorf("ibverbs: proxy %d: %w", proxy, rdmamgr.ErrRevoked)
	}
	if _, ok := rd.resolvers[r]; ok {
		return nil
	}
	if len(rd.resolvers) >= maxResolvers {
		for q := range rd.resolvers {
			if q.Err() != nil {
				delete(rd.resolvers, q)
			}
		}
		if len(rd.resolvers) >= maxResolvers {
			return fmt.Errorf("ibverbs: proxy %d resolved on %d routes: %w", proxy, maxResolvers, rdmamgr.ErrLimit)
		}
	}
	if rd.resolvers == nil {
		rd.resolvers = make(map[*route]struct{})
	}
	rd.resolvers[r] = struct{}{}
	return nil
}

// invalidate tells every route that resolved the proxy id that it goes
// (why: REVOKED or RELEASED) and waits for their acks, until
// invalidateWait or Close; the caller then deregisters its remote memory
// region. A route whose initiator did not ack in time may still meet the
// dead rkey (a remote access error ends it). No-op for a region no
// route resolved.
func (b *Backend) invalidate(id uint64, why rdmapb.Code) {
	b.mrMu.Lock()
	rd := b.mrs[id]
	if rd == nil || rd.invalWhy != 0 {
		b.mrMu.Unlock()
		return
	}
	rd.invalWhy = why
	routes := rd.resolvers
	rd.resolvers = nil
	b.mrMu.Unlock()
	if len(routes) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, invalidateWait)
	defer cancel()
	type sent struct {
		r *route
		w *invalWait
	}
	ws := make([]sent, 0, len(routes))
	missed := 0
	for r := range routes {
		if r.Err() != nil {
			continue
		}
		if w := r.sendInvalidate(ctx, id, why); w != nil {
			ws = append(ws, sent{r, w})
		} else if r.Err() == nil {
			missed++
		}
	}
	for _, s := range ws {
		select {
		case <-s.w.done:
		case <-s.r.Done():
		case <-ctx.Done():
			select {
			case <-s.w.done:
			default:
				missed++
			}
		}
	}
	b.invalidations.Add(1)
	if missed > 0 {
		b.invalGiveUps.Add(uint64(missed))
		b.log.Warn("invalidating a proxy: gave up on initiators' acks (their routes fail if they use its rkey)",
			"region", id, "routes", missed)
	}
}

// sendInvalidate sends the invalidate of proxy on r (the owner's side),
// once r has room for one more unacked; nil if r ended or ctx did first.
func (r *route) sendInvalidate(ctx context.Context, proxy uint64, why rdmapb.Code) *invalWait {
	select {
	case r.invalTok <- struct{}{}:
	case <-r.Done():
		return nil
	case <-ctx.Done():
		return nil
	}
	w := &invalWait{proxy: proxy, done: make(chan struct{})}
	r.postMu.Lock()
	if r.failing {
		r.postMu.Unlock()
		<-r.invalTok
		return nil
	}
	seq := r.invalSeq
	r.invalSeq++
	r.viaMu.Lock()
	r.invals[seq] = w
	r.viaMu.Unlock()
	err := r.ackLocked(ackMsg{kind: ctlInvalidate, seq: seq, code: uint32(why), proxy: proxy})
	r.postMu.Unlock()
	if err != nil {
		r.fail(fmt.Errorf("ibverbs: queue pair %d: invalidate: %w", r.qp.qpn, err))
		return nil
	}
	return w
}

// sayGoodbye sends a goodbye on every host agent's accepted route (Close,
// before it fails them), so that their initiators end what waits on an
// answer at once, and waits until they were sent (at most goodbyeWait).
func (b *Backend) sayGoodbye() {
	b.mu.Lock()
	var routes []*route
	for r := range b.routes {
		if r.agentServe {
			routes = append(routes, r)
		}
	}
	b.mu.Unlock()
	var sent []*route
	for _, r := range routes {
		var err error
		r.postMu.Lock()
		if !r.failing && r.bye == nil {
			r.bye = make(chan struct{})
			err = r.ackLocked(ackMsg{kind: ctlGoodbye})
			sent = append(sent, r)
		}
		r.postMu.Unlock()
		if err != nil {
			r.fail(fmt.Errorf("ibverbs: queue pair %d: goodbye: %w", r.qp.qpn, err))
		}
	}
	if len(sent) == 0 {
		return
	}
	t := time.NewTimer(goodbyeWait)
	defer t.Stop()
	for _, r := range sent {
		select {
		case <-r.bye:
		case <-r.Done():
		case <-t.C:
			return
		}
	}
}

// errGoodbye is the error of an initiator's route whose owner said
// goodbye (its backend closed).
var errGoodbye = fmt.Errorf("ibverbs: the far backend closed (goodbye): %w", rdmamgr.ErrPeerGone)
