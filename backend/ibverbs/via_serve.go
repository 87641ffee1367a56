//go:build ibverbs

package ibverbs

import (
	"context"
	"fmt"
	"sync"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/agentapi"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// The owner's side of host agents' routes: a queue pair accepted while
// the backend had a resolver (agentServe) has a worker goroutine that
// serves its control messages in the order they came, since a Resolve,
// an attached process's Event and a CheckedLanding's Deliver may wait
// (bounded), which the poller must not.

// ctlWork is a control message copied out of its ring slot for the
// worker (the slot is reposted at once; the initiator's credits bound
// how many wait).
type ctlWork struct {
	m   ctlMsg
	msg []byte // a Send's message
}

// queueLocked hands the message p (decoded: m) to the worker. The caller
// holds postMu and reposts the slot after.
func (r *route) queueLocked(m ctlMsg, p []byte) error {
	w := ctlWork{m: m}
	if m.kind == ctlSend {
		w.msg = append([]byte(nil), p[m.hdrLen:]...)
	}
	select {
	case r.work <- w:
		return nil
	default: // more than the credits the peer has: it does not keep count
		return fmt.Errorf("ibverbs: more control messages than receive slots: %w", rdmamgr.ErrProtocol)
	}
}

// startWorker makes r, an accepted route not yet visible, a host agent's
// (agentServe) and starts its worker; false once Close began (r then
// refuses what needs one).
func (b *Backend) startWorker(r *route) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return false
	}
	r.agentServe, r.work = true, make(chan ctlWork, b.cfg.RecvSlots)
	b.workers.Add(1)
	go r.serveWork()
	return true
}

// stopWorkers says goodbye on the host agent's routes (via_inval.go),
// ends the resolves served and the routes (so their workers end) and
// waits for the workers; Close calls it before it takes life.
// No worker starts once closed is set: startWorker checks it under mu,
// and taking mu here orders a startWorker that did not see it before
// the wait.
func (b *Backend) stopWorkers() {
	b.sayGoodbye()
	b.cancelCtx()
	b.failAll(fmt.Errorf("ibverbs: backend closed: %w", rdmamgr.ErrClosed)) // takes mu
	b.workers.Wait()
}

// serveWork is the worker of an agentServe route: it ends with the route.
func (r *route) serveWork() {
	defer r.b.workers.Done()
	for {
		select {
		case <-r.Done():
			return
		case w := <-r.work:
			a := ackMsg{seq: w.m.seq}
			var res error
			late := false
			switch {
			case w.m.kind == ctlNotice && w.m.via:
				late, res = r.notifyVia(w.m)
			case w.m.kind == ctlNotice:
				res = r.notify(w.m)
			case w.m.kind == ctlSend && w.m.via:
				late, res = r.deliverVia(w.m, w.msg)
			case w.m.kind == ctlSend:
				res = r.deliver(w.m, w.msg)
			case w.m.kind == ctlResolve:
				a.kind = ctlResolved
				a.res, res = r.resolveFor(w.m)
			}
			if late { // answered by lateAck's func, when the process answers
				continue
			}
			if w.m.kind != ctlResolve {
				if res == nil {
					r.b.served.ops.Add(1)
				} else {
					r.b.served.rejected.Add(1)
				}
			}
			a.code = uint32(backend.RemoteCode(res))
			var err error
			r.postMu.Lock()
			if !r.failing && a.res != nil {
				// Recorded under postMu: the answer goes out before
				// any invalidate of its proxy on this route.
				if e := r.b.addResolver(a.res.proxy, r); e != nil {
					a.res, a.code = nil, uint32(backend.RemoteCode(e))
				}
			}
			if !r.failing {
				err = r.ackLocked(a)
			}
			r.postMu.Unlock()
			if err != nil {
				r.fail(fmt.Errorf("ibverbs: queue pair %d: %w", r.qp.qpn, err))
			}
		}
	}
}

// resolveFor answers a resolve: the resolver's proxy of the process's
// region, and its remote memory region.
func (r *route) resolveFor(m ctlMsg) (*viaRes, error) {
	rr := r.b.resolver.Load()
	if rr == nil || !r.agentServe {
		return nil, errServeNotAgent
	}
	ctx, cancel := context.WithTimeout(r.b.ctx, agentapi.ResolveTimeout)
	local, localKey, err := rr.r.Resolve(ctx, m.slot, m.region, m.key, m.access)
	cancel()
	if err != nil {
		return nil, err
	}
	// The proxy must admit what was asked (key, access, lease, its gate).
	b := r.b
	b.mrMu.Lock()
	rd := b.mrs[local]
	var res viaRes
	switch {
	case rd == nil:
		err = fmt.Errorf("ibverbs: proxy %d is not registered with this device: %w", local, rdmamgr.ErrReleased)
	case rd.remote == nil:
		err = fmt.Errorf("ibverbs: proxy %d: %w", local, rdmamgr.ErrRevoked)
	case rd.via != 0 && (rd.via != m.slot || rd.procRegion != m.region):
		err = fmt.Errorf("ibverbs: proxy %d stands for region %d via %d, not %d via %d: %w",
			local, rd.procRegion, rd.via, m.region, m.slot, rdmamgr.ErrInvalid)
	default:
		rd.via, rd.procRegion = m.slot, m.region
		res = viaRes{addr: rd.remote.addr, rkey: rd.remote.rkey, access: rd.access, length: rd.length, proxy: local, proxyKey: localKey}
	}
	b.mrMu.Unlock()
	if err != nil {
		return nil, err
	}
	ref, err := b.reg.AcquireRemote(local, localKey, 0, res.length, m.access)
	if err != nil {
		return nil, err
	}
	ref.Release()
	return &res, nil
}

// notifyVia delivers the event of a PutWithImm for an attached process:
// the notice names the proxy (from a resolve answered on a route of this
// backend), whose process and region the backend recorded then. late: an
// agentapi.AsyncInbox took it and acks it when the process answers.
func (r *route) notifyVia(m ctlMsg) (late bool, err error) {
	rr := r.b.resolver.Load()
	if rr == nil || !r.agentServe {
		return false, errServeNotAgent
	}
	if m.origin != 0 && !r.peerAgent {
		return false, errOriginPeer
	}
	r.b.mrMu.Lock()
	rd := r.b.mrs[m.region]
	var via uint16
	var region uint64
	if rd != nil {
		via, region = rd.via, rd.procRegion
	}
	r.b.mrMu.Unlock()
	if via == 0 {
		return false, errNoticeNotProxy
	}
	ref, err := r.b.reg.AcquireRemote(m.region, m.key, m.offset, m.length, buffer.AccessWrite|buffer.AccessNotify)
	if err != nil {
		return false, err
	}
	ref.Release()
	in, err := inboxVia(rr, via)
	if err != nil {
		return false, err
	}
	peer := r.peer
	if m.origin != 0 {
		peer = m.origin
	}
	ev := backend.Event{Peer: peer, Region: region, Offset: m.offset, Length: m.length, Imm: m.imm}
	if ai, ok := in.(agentapi.AsyncInbox); ok {
		if err := ai.EventAsync(ev, r.lateAck(m.seq)); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, in.Event(ev)
}

// deliverVia hands a Send's message to the attached process at its via;
// late as for notifyVia (agentapi.AsyncLanding).
func (r *route) deliverVia(m ctlMsg, msg []byte) (late bool, err error) {
	rr := r.b.resolver.Load()
	if rr == nil || !r.agentServe {
		return false, errServeNotAgent
	}
	if m.origin != 0 && !r.peerAgent {
		return false, errOriginPeer
	}
	in, err := inboxVia(rr, m.slot)
	if err != nil {
		return false, err
	}
	peer := r.peer
	if m.origin != 0 {
		peer = m.origin
	}
	l, err := recvInto(in, peer, msg)
	if err != nil {
		return false, err
	}
	if al, ok := l.(agentapi.AsyncLanding); ok {
		if err := al.DeliverAsync(len(msg), m.imm, m.hasImm, r.lateAck(m.seq)); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, landed(l, m, msg)
}

// lateAck returns the answer func of the message seq handed to an async
// inbox or landing: called once, from any goroutine, it counts the
// outcome and acks it (ackLocked: a free cell or the backlog). Acks may
// thus overtake one another (the initiator matches them by seq); the
// message's slot was reposted when the worker took it, so the credit the
// ack returns is sound in any order. On a failing route the answer is
// dropped: fail sets failing under postMu before teardown frees the ring.
func (r *route) lateAck(seq uint32) func(error) {
	var once sync.Once
	return func(res error) {
		once.Do(func() {
			if res == nil {
				r.b.served.ops.Add(1)
			} else {
				r.b.served.rejected.Add(1)
			}
			var err error
			r.postMu.Lock()
			if !r.failing {
				err = r.ackLocked(ackMsg{seq: seq, code: uint32(backend.RemoteCode(res))})
			}
			r.postMu.Unlock()
			if err != nil {
				r.fail(fmt.Errorf("ibverbs: queue pair %d: %w", r.qp.qpn, err))
			}
		})
	}
}

func inboxVia(rr *resolverRef, via uint16) (backend.Inbox, error) {
	in, err := rr.r.Inbox(via)
	if err == nil && in == nil {
		err = fmt.Errorf("ibverbs: no inbox for via %d: %w", via, rdmamgr.ErrNoReceive)
	}
	return in, err
}

// land copies msg into the receive buffer in gives for it; a host agent's
// landing (agentapi.CheckedLanding) may still refuse it.
func land(in backend.Inbox, peer uint64, m ctlMsg, msg []byte) error {
	l, err := recvInto(in, peer, msg)
	if err != nil {
		return err
	}
	return landed(l, m, msg)
}

// recvInto takes the receive buffer in gives for msg and copies msg in.
func recvInto(in backend.Inbox, peer uint64, msg []byte) (backend.Landing, error) {
	l, err := in.Recv(peer, uint64(len(msg)))
	if err != nil {
		return nil, err
	}
	mem := l.Mem()
	if len(mem) < len(msg) {
		err := fmt.Errorf("ibverbs: message of %d bytes, receive buffer of %d: %w", len(msg), len(mem), rdmamgr.ErrReceiveTooSmall)
		l.Done(0, 0, false, err)
		return nil, err
	}
	copy(mem, msg)
	return l, nil
}

// landed completes l, which holds msg.
func landed(l backend.Landing, m ctlMsg, msg []byte) error {
	if cl, ok := l.(agentapi.CheckedLanding); ok {
		return cl.Deliver(len(msg), m.imm, m.hasImm)
	}
	l.Done(len(msg), m.imm, m.hasImm, nil)
	return nil
}

// putAck writes a into cell p (ctlAck, or ctlResolved with its answer)
// and returns its length.
func (a *ackMsg) put(p []byte) int {
	m := ctlMsg{kind: ctlAck, seq: a.seq, imm: a.code}
	switch a.kind {
	case ctlInvalidate, ctlInvalAck, ctlGoodbye:
		m.kind, m.region = a.kind, a.proxy
		return m.put(p)
	}
	if a.kind == ctlResolved {
		m.kind = ctlResolved
		if a.res != nil && rdmapb.Code(a.code) == rdmapb.Code_OK {
			m.addr, m.rkey, m.access, m.length = a.res.addr, a.res.rkey, a.res.access, a.res.length
			m.region, m.key = a.res.proxy, a.res.proxyKey
		}
	}
	return m.put(p)
}
