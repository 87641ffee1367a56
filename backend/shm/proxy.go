//go:build linux

package shm

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/coarseclock"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	"github.com/rdmamgr/rdmamgr/internal/wiring"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// A host agent's side of an shm route (package doc, "A host agent"): the
// agent is an initiator of each attached process and registers the
// regions it maps from it as proxy regions of its own registry
// (memreg.RegisterProxy), behind a gate over the region's state-table
// slot. Reached through internal/wiring.ProxyRoute.

var (
	_ wiring.ProxyRoute = (*route)(nil)
	_ wiring.ProxyGate  = (*proxyGate)(nil)
)

// proxyGate is the memreg.GateCloser of a proxied region: a user counts
// into the region's slot exactly as a copy does (table.enter). It holds
// the region's mapping, the state table and the coarse clock until Close,
// so it outlives the route safely (its Enter then fails).
type proxyGate struct {
	r      *route
	t      *table
	e      *entry // its mapping and access
	slot   uint32
	id     uint64
	closed atomic.Bool
}

// Enter implements memreg.Gate: ErrPeerGone once the route ended, else
// the slot's word (ErrRevoked, ErrReleased, ErrExpired).
func (g *proxyGate) Enter() error {
	if g.r.st.Err() != nil {
		return rdmamgr.ErrPeerGone
	}
	if st := g.t.enter(g.slot, g.id); st != stAlive {
		return stateErr(st)
	}
	return nil
}

// Access implements wiring.ProxyGate.
func (g *proxyGate) Access() buffer.Access { return g.e.access }

// Leave implements memreg.Gate.
func (g *proxyGate) Leave() { g.t.leave(g.slot) }

// Close implements memreg.GateCloser: the proxy region was freed (no user
// is in): the mapping, the table and the clock may go.
func (g *proxyGate) Close() {
	if !g.closed.CompareAndSwap(false, true) {
		return
	}
	r := g.r
	r.mu.Lock()
	gs := r.proxies[g.id]
	for i, x := range gs {
		if x == g {
			gs[i] = gs[len(gs)-1]
			gs = gs[:len(gs)-1]
			break
		}
	}
	if len(gs) == 0 {
		delete(r.proxies, g.id)
	} else {
		r.proxies[g.id] = gs
	}
	r.mu.Unlock()
	c := r.cache
	c.mu.Lock()
	if n := c.proxied[g.id] - 1; n > 0 {
		c.proxied[g.id] = n
	} else {
		delete(c.proxied, g.id)
	}
	c.release(g.e.m)
	c.mu.Unlock()
	g.t.release()
	coarseclock.Release()
}

// MapProxy implements wiring.ProxyRoute.
func (r *route) MapProxy(ctx context.Context, region uint64, key buffer.Key, need buffer.Access) ([]byte, memreg.Gate, error) {
	if need == 0 {
		need = buffer.AccessRead
	}
	if !r.gate.Enter() {
		return nil, nil, r.closedErr()
	}
	defer r.gate.Leave()
	e := r.cache.get(region, key)
	if e == nil {
		var code rdmapb.Code
		var err error
		e, code, err = r.mapEntry(region, key, need, func(req uint64, ch chan mapReply) (mapReply, error) {
			return r.awaitCtx(ctx, req, ch)
		}, nil, ctx)
		switch {
		case err != nil:
			return nil, nil, err
		case code == rdmapb.Code_NOT_SUPPORTED:
			return nil, nil, ErrNotShareable
		case code != rdmapb.Code_OK:
			op := backend.OpRead
			if need.Allows(buffer.AccessWrite) {
				op = backend.OpWrite
			}
			return nil, nil, fmt.Errorf("shm: map region %d for a proxy: %w", region, &backend.RemoteError{Code: code, Op: op})
		}
	}
	defer r.cache.unref(e)
	switch {
	case e.fallback, e.dev != nil:
		return nil, nil, ErrNotShareable
	case !e.access.Allows(need):
		return nil, nil, fmt.Errorf("shm: region %d grants %v, a proxy needs %v: %w", region, e.access, need, rdmamgr.ErrAccess)
	}
	if !r.table.tryAcquire() {
		return nil, nil, r.closedErr()
	}
	coarseclock.Acquire()
	g := &proxyGate{r: r, t: r.table, e: e, slot: e.slot, id: e.id}
	r.cache.mu.Lock()
	r.cache.proxied[e.id]++
	e.m.refs++ // the mapping stays until Close, listed or not
	r.cache.mu.Unlock()
	r.mu.Lock()
	r.proxies[g.id] = append(r.proxies[g.id], g)
	r.mu.Unlock()
	// The reader marks the route failed before it tells every proxy of the
	// end (cutProxies): either it saw g, or g sees the failure here.
	if err := r.st.Err(); err != nil {
		g.Close()
		return nil, nil, err
	}
	return e.mem, g, nil
}

// closedErr is the route's error, or ErrClosed.
func (r *route) closedErr() error {
	if err := r.st.Err(); err != nil {
		return err
	}
	return errRouteClosed
}

// awaitCtx waits for the answer to map request req, ctx's end or the
// route's.
func (r *route) awaitCtx(ctx context.Context, req uint64, ch chan mapReply) (mapReply, error) {
	limit := time.NewTimer(mapTimeout)
	defer limit.Stop()
	select {
	case rep, ok := <-ch:
		if !ok {
			return mapReply{fd: -1}, r.st.Err()
		}
		return rep, nil
	case <-ctx.Done():
		r.forget(req, ch)
		return mapReply{fd: -1}, ctx.Err()
	case <-limit.C:
		r.forget(req, ch)
		r.fail(errOwnerSilent)
		return mapReply{fd: -1}, r.st.Err()
	case <-r.stop:
		r.forget(req, ch)
		return mapReply{fd: -1}, r.st.Err()
	}
}

// Notify implements wiring.ProxyRoute.
func (r *route) Notify(ctx context.Context, region uint64, off, n uint64, imm uint32, origin uint64) error {
	r.mu.Lock()
	slot := uint32(0)
	if gs := r.proxies[region]; len(gs) > 0 {
		slot = gs[len(gs)-1].slot // the newest: an older one may be of a slot cut since
	}
	r.mu.Unlock()
	if slot == 0 {
		return fmt.Errorf("shm: notify region %d: no proxy of it: %w", region, rdmamgr.ErrReleased)
	}
	req, ch := r.newRequest()
	m := eventMsg{req: req, slot: slot, region: region, off: off, n: n, imm: imm, origin: origin}
	if err := r.writeRequest(m.encode(), nil, ctx); err != nil {
		r.forget(req, ch)
		return err
	}
	rep, err := r.awaitCtx(ctx, req, ch)
	if err != nil {
		return err
	}
	rep.close()
	if rep.m.code != uint32(rdmapb.Code_OK) {
		return &backend.RemoteError{Code: rdmapb.Code(rep.m.code), Op: backend.OpWriteImm}
	}
	return nil
}

// OnCut implements wiring.ProxyRoute.
func (r *route) OnCut(f func(region uint64)) {
	r.mu.Lock()
	r.onCut = f
	r.mu.Unlock()
}

// cutNotice is the owner's msgCut: region id in slot is cut, and the owner
// waits for its users; the agent's OnCut revokes its proxies of it.
func (r *route) cutNotice(slot uint32, id uint64) {
	r.mu.Lock()
	f, hit := r.onCut, false
	for _, g := range r.proxies[id] {
		hit = hit || g.slot == slot
	}
	r.mu.Unlock()
	if f != nil && hit {
		f(id)
	}
}

// cutProxies tells OnCut of every proxied region once the route ended
// (the reader's exit, after the route was marked failed).
func (r *route) cutProxies() {
	r.mu.Lock()
	f := r.onCut
	ids := make([]uint64, 0, len(r.proxies))
	for id := range r.proxies {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	if f == nil {
		return
	}
	for _, id := range ids {
		f(id)
	}
}

// acceptAgentRoute is AcceptRoute for this process's own host agent
// (wiring.SHMAcceptAgentRoute): the connection that proves the token it
// hands out is marked as the agent's. The registry stops pooling: the
// agent maps our local regions while we hold them (memreg.SetUnpooled).
func (b *Backend) acceptAgentRoute(ctx context.Context, peerID uint64, p []byte) ([]byte, error) {
	b.reg.SetUnpooled()
	return b.acceptRoute(ctx, peerID, p, true)
}

func init() {
	wiring.SHMAcceptAgentRoute = func(b any, ctx context.Context, peerID uint64, info []byte) ([]byte, error) {
		return b.(*Backend).acceptAgentRoute(ctx, peerID, info)
	}
}
