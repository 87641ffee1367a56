//go:build ibverbs

package ibverbs

import (
	"fmt"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
)

// The poller's side of the control messages: the owner serves notices and
// Sends and acks them; the initiator completes its ops on their acks.

// ctlComplete handles a completion of control work: a receive into a ring
// slot, or the send of an ack.
func (b *Backend) ctlComplete(w wc) {
	ringID, ack, i := splitCtlID(w.wrID)
	b.mu.Lock()
	r := b.byQPN[w.qpn]
	b.mu.Unlock()
	if r == nil || r.ring.id != ringID {
		b.log.Debug("completion of an unknown control work request", "wr_id", w.wrID, "qp", w.qpn, "status", wcStatusStr(w.status))
		return
	}
	if ack {
		r.ackSent(i, w.status)
		return
	}
	r.received(i, w)
}

// received handles the message received into slot i of the ring. The ring
// is read under postMu and only while the route is not failing: teardown
// frees it after.
func (r *route) received(i int, w wc) {
	if w.status != wcSuccess {
		if w.status != wcWRFlushErr {
			r.fail(routeError(r.qp.qpn, w.status))
		}
		return
	}
	var (
		o        *op
		opErr    error
		routeErr error
	)
	r.postMu.Lock()
	switch {
	case r.failing:
	case int(w.byteLen) > r.ring.slotSize:
		routeErr = fmt.Errorf("ibverbs: control message of %d bytes: %w", w.byteLen, rdmamgr.ErrProtocol)
	case r.accepted:
		routeErr = r.serveLocked(i, r.ring.slot(i)[:w.byteLen])
	default:
		o, opErr, routeErr = r.ackedLocked(i, r.ring.slot(i)[:w.byteLen])
	}
	r.postMu.Unlock()
	r.lastActive.Store(r.b.coarse.Load())
	if routeErr != nil {
		r.fail(fmt.Errorf("ibverbs: queue pair %d: %w", r.qp.qpn, routeErr))
		return
	}
	if o != nil {
		r.acked(o, opErr)
	}
}

// ackedLocked takes the initiator's op that the ack p answers (by its
// seq: the owner acks in order, except a host agent's late answers, which
// may overtake: via_serve.go) and its outcome, and reposts the
// slot; an answer to a resolve goes to its poster (via.go). The caller
// holds postMu.
func (r *route) ackedLocked(i int, p []byte) (o *op, opErr, routeErr error) {
	m, err := decodeCtl(p)
	switch {
	case err != nil:
	case m.kind == ctlAck, m.kind == ctlResolved, m.kind == ctlInvalidate, m.kind == ctlGoodbye:
	default:
		err = fmt.Errorf("ibverbs: control message kind %d sent to the initiator: %w", m.kind, rdmamgr.ErrProtocol)
	}
	if err != nil {
		return nil, nil, err
	}
	if err := r.ring.postRecv(r.qp, i); err != nil {
		return nil, nil, err
	}
	switch m.kind {
	case ctlResolved:
		return nil, nil, r.answered(m)
	case ctlInvalidate:
		return nil, nil, r.invalidatedLocked(m)
	case ctlGoodbye:
		return nil, nil, errGoodbye
	}
	r.ackMu.Lock()
	for j, a := range r.acks { // the oldest, unless a late answer overtook it
		if a.seq == m.seq {
			o = a
			copy(r.acks[j:], r.acks[j+1:])
			r.acks[len(r.acks)-1] = nil
			r.acks = r.acks[:len(r.acks)-1]
			break
		}
	}
	r.ackMu.Unlock()
	if o == nil {
		return nil, nil, fmt.Errorf("ibverbs: ack %d answers no message awaiting one: %w", m.seq, rdmamgr.ErrProtocol)
	}
	r.credits.release(1) // its slot at the owner was reposted before the ack
	return o, ackErr(o.wr.Op, m.imm), nil
}

// serveLocked serves the notice or Send p received into slot i, reposts
// the slot and acks it with the outcome's code; on a host agent's queue
// pair (agentServe) it hands the message to the route's worker instead
// (via_serve.go), which acks it. The caller holds postMu.
func (r *route) serveLocked(i int, p []byte) error {
	m, err := decodeCtl(p)
	switch {
	case err != nil:
	case m.kind == ctlAck, m.kind == ctlResolved, m.kind == ctlInvalidate, m.kind == ctlGoodbye:
		err = fmt.Errorf("ibverbs: control message kind %d sent to the owner: %w", m.kind, rdmamgr.ErrProtocol)
	}
	if err != nil {
		return err
	}
	if m.kind == ctlInvalAck { // takes no credit, needs no ack: served here
		if err := r.ring.postRecv(r.qp, i); err != nil {
			return err
		}
		r.invalAckedLocked(m)
		return nil
	}
	if r.agentServe {
		if err := r.queueLocked(m, p); err != nil {
			return err
		}
		return r.ring.postRecv(r.qp, i) // after the message was copied out
	}
	var res error
	a := ackMsg{seq: m.seq}
	switch {
	case m.kind == ctlResolve:
		a.kind, res = ctlResolved, errServeNotAgent
	case m.via:
		res = errServeNotAgent
	case m.kind == ctlNotice:
		res = r.notify(m)
	default:
		res = r.deliver(m, p[m.hdrLen:])
	}
	if m.kind != ctlResolve {
		if res == nil {
			r.b.served.ops.Add(1)
		} else {
			r.b.served.rejected.Add(1)
		}
	}
	if err := r.ring.postRecv(r.qp, i); err != nil { // after the message was copied out
		return err
	}
	a.code = uint32(backend.RemoteCode(res))
	return r.ackLocked(a)
}

// notify hands the owner's inbox the event of a PutWithImm whose bytes
// are in place (the notice came after the RDMA WRITE on the same queue
// pair), once the handle's key, range and rights are checked; a notice
// for an attached process goes to its inbox (notifyVia).
func (r *route) notify(m ctlMsg) error {
	if m.via {
		_, err := r.notifyVia(m)
		return err
	}
	in := r.b.inboxOf()
	if in == nil {
		return fmt.Errorf("ibverbs: event %d: no inbox: %w", m.imm, rdmamgr.ErrNoReceive)
	}
	ref, err := r.b.reg.AcquireRemote(m.region, m.key, m.offset, m.length, buffer.AccessWrite|buffer.AccessNotify)
	if err != nil {
		return err
	}
	ref.Release()
	return in.Event(backend.Event{Peer: r.peer, Region: m.region, Offset: m.offset, Length: m.length, Imm: m.imm})
}

// deliver copies the Send message msg into the receive buffer the owner's
// manager posted next (or, for an attached process, its inbox gives:
// deliverVia).
func (r *route) deliver(m ctlMsg, msg []byte) error {
	if m.via {
		_, err := r.deliverVia(m, msg)
		return err
	}
	in := r.b.inboxOf()
	if in == nil {
		return fmt.Errorf("ibverbs: message of %d bytes: no inbox: %w", len(msg), rdmamgr.ErrNoReceive)
	}
	if err := land(in, r.peer, m, msg); err != nil {
		return err
	}
	r.b.served.bytesIn.Add(uint64(len(msg)))
	return nil
}

// ackLocked sends a, in order: at once if a cell is free and no ack
// waits, else after those waiting (ackSent). On the initiator (its
// invalidate acks) at most ctlReserve cells serve acks: the others are
// its operations'. The caller holds postMu.
func (r *route) ackLocked(a ackMsg) error {
	if len(r.backlog) == 0 && (r.accepted || r.ackBusy < ctlReserve) {
		if cell, ok := r.ring.allocCell(); ok {
			return r.postAckLocked(cell, a)
		}
	}
	r.backlog = append(r.backlog, a)
	return nil
}

func (r *route) postAckLocked(cell int, a ackMsg) error {
	size := a.put(r.ring.cell(cell))
	if a.kind == ctlGoodbye {
		r.byeCell = cell + 1
	}
	batch := make(wrBuf, 0, 1)
	batch.addSend(r.ring.ackID(cell), r.ring.cellAddr(cell), uint32(size), r.ring.mr.lkey, 0, 0, 0)
	r.outstanding.Add(1)
	r.ackBusy++
	if _, err := r.qp.post(batch); err != nil {
		r.ackBusy--
		r.ring.freeCell(cell)
		r.wrDone(1)
		return fmt.Errorf("ack %d: %w: %w", a.seq, err, rdmamgr.ErrClosed)
	}
	return nil
}

// ackSent handles the completion of the ack that used cell: the cell
// serves the next ack waiting, if any.
func (r *route) ackSent(cell int, status uint32) {
	var err error
	r.postMu.Lock()
	r.ring.freeCell(cell)
	r.ackBusy--
	if r.byeCell == cell+1 { // the goodbye is out
		r.byeCell = 0
		close(r.bye)
	}
	if status == wcSuccess && !r.failing && len(r.backlog) > 0 {
		a := r.backlog[0]
		r.backlog = r.backlog[1:]
		c, _ := r.ring.allocCell() // the one just freed, at least
		err = r.postAckLocked(c, a)
	}
	r.postMu.Unlock()
	switch {
	case status != wcSuccess && status != wcWRFlushErr:
		r.fail(routeError(r.qp.qpn, status))
	case err != nil:
		r.fail(fmt.Errorf("ibverbs: queue pair %d: %w", r.qp.qpn, err))
	}
	r.wrDone(1)
}
