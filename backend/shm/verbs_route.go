//go:build linux

package shm

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/word"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// atomic runs a CompareAndSwap or FetchAdd on a mapped word with the
// processor's atomic instructions: the owner's sync/atomic and every other
// peer's agree. The region's state is checked around it as for a copy.
func (r *route) atomic(e *entry, wr *backend.WorkRequest) error {
	hdr := r.table
	if !e.access.Allows(buffer.AccessAtomic) {
		hdr.word(0, wRejected).Add(1)
		return fmt.Errorf("shm: %s on a %s buffer: %w", wr.Op, e.access, rdmamgr.ErrAccess)
	}
	if err := buffer.CheckRange(uint64(len(e.mem)), wr.Remote.Offset, 8); err != nil {
		hdr.word(0, wRejected).Add(1)
		return fmt.Errorf("shm: %s at %d of a %d-byte region: %w", wr.Op, wr.Remote.Offset, len(e.mem), err)
	}
	if st := r.table.enter(e.slot, e.id); st != stAlive {
		return r.refused(e, wr, st)
	}
	old, err := guardedAtomic(wr, e.mem)
	r.table.leave(e.slot)
	if err != nil {
		hdr.word(0, wRejected).Add(1)
		return fmt.Errorf("shm: %s: %w", wr.Op, err)
	}
	hdr.word(0, wOps).Add(1)
	wr.Result = old
	return nil
}

func guardedAtomic(wr *backend.WorkRequest, mem []byte) (old uint64, err error) {
	prev := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(prev)
		if p := recover(); p != nil {
			err = fmt.Errorf("%w (%v)", errCopyFault, p)
		}
	}()
	if wr.Op == backend.OpCompareSwap {
		return word.CompareAndSwap(mem, wr.Remote.Offset, wr.Compare, wr.Swap)
	}
	return word.FetchAdd(mem, wr.Remote.Offset, wr.Swap)
}

// notify tells the owner that a PutWithImm's bytes are in place and
// returns its inbox's answer.
func (r *route) notify(e *entry, wr *backend.WorkRequest) error {
	req, ch := r.newRequest()
	m := eventMsg{req: req, slot: e.slot, region: e.id, off: wr.Remote.Offset, n: uint64(len(wr.Local)), imm: wr.Imm, origin: originOf(wr)}
	if err := writePacket(r.conn, m.encode(), -1); err != nil {
		r.forget(req, ch)
		r.fail(errOwnerGone)
		return r.st.Err()
	}
	return r.ackOf(wr, req, ch)
}

// sendMessage moves a Send's bytes to the owner in packets; the owner
// lands them in its next posted receive buffer and answers. A message is
// not cut short once started (the owner would be left mid-message): a
// stalled owner fails the route at wr's deadline.
func (r *route) sendMessage(wr *backend.WorkRequest) error {
	if len(wr.Local) > maxSend {
		return fmt.Errorf("shm: send of %d bytes, at most %d: %w", len(wr.Local), maxSend, rdmamgr.ErrLimit)
	}
	req, ch := r.newRequest()
	if !wr.Deadline.IsZero() {
		r.conn.SetWriteDeadline(wr.Deadline)
		defer r.conn.SetWriteDeadline(time.Time{})
	}
	pkt := make([]byte, 0, 32+fragMax)
	data := wr.Local
	for first := true; first || len(data) > 0; first = false {
		if first {
			pkt = sendHeader(pkt, req, uint64(len(data)), wr.Imm, wr.HasImm, originOf(wr))
		} else {
			pkt = sendMoreHeader(pkt, req)
		}
		n := min(len(data), fragMax)
		pkt = append(pkt, data[:n]...)
		data = data[n:]
		if err := writePacket(r.conn, pkt, -1); err != nil {
			r.forget(req, ch)
			r.fail(fmt.Errorf("shm: send stalled or owner gone: %v: %w", err, rdmamgr.ErrPeerGone))
			return r.st.Err()
		}
	}
	return r.ackOf(wr, req, ch)
}

// newRequest registers a request awaiting the owner's answer.
func (r *route) newRequest() (uint64, chan mapReply) {
	ch := make(chan mapReply, 1)
	r.mu.Lock()
	r.nextReq++
	req := r.nextReq
	r.replies[req] = ch
	r.mu.Unlock()
	return req, ch
}

// ackOf waits for the owner's answer to req and returns its error.
func (r *route) ackOf(wr *backend.WorkRequest, req uint64, ch chan mapReply) error {
	rep, err := r.await(wr, req, ch)
	if err != nil {
		return err
	}
	rep.close()
	if rep.m.code != uint32(rdmapb.Code_OK) {
		return &backend.RemoteError{Code: rdmapb.Code(rep.m.code), Op: wr.Op}
	}
	return nil
}

// originOf is the origin manager id wr carries to the owner (0: none).
func originOf(wr *backend.WorkRequest) uint64 { return wr.Origin }
