//go:build linux

package shm

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/backend/internal/routestate"
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
		return r.refused(e, wr.Op, st)
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
// lands them in its next posted receive buffer and answers. wr's deadline
// bounds each packet's wait for room (a packet goes whole or not at all:
// SOCK_SEQPACKET), and it and a cancel are checked between packets: a
// message they end mid-way is aborted (msgSendAbort: the owner gives its
// landing back and delivers nothing), so the operation fails alone and the
// route serves on. Only an owner that does not take even the abort within
// abortBound (stalled) fails the route.
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
		if !first {
			if err := r.ended(wr); err != nil {
				r.forget(req, ch)
				return r.abortSend(req, err)
			}
			pkt = sendMoreHeader(pkt, req)
		} else {
			pkt = sendHeader(pkt, req, uint64(len(data)), wr.Imm, wr.HasImm, originOf(wr))
		}
		n := min(len(data), fragMax)
		pkt = append(pkt, data[:n]...)
		data = data[n:]
		err := writePacket(r.conn, pkt, -1)
		if h := testHookSendPacket; h != nil && err == nil {
			h(wr)
		}
		if err != nil {
			r.forget(req, ch)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				r.fail(fmt.Errorf("shm: send: owner gone: %v: %w", err, rdmamgr.ErrPeerGone))
				return r.st.Err()
			}
			dl := routestate.OpError("shm", wr, rdmamgr.ErrDeadline)
			if first {
				return dl // nothing of it went
			}
			return r.abortSend(req, dl)
		}
	}
	return r.ackOf(wr, req, ch)
}

// testHookSendPacket, when set by a test before the route's first Send,
// runs after each packet of a message is written.
var testHookSendPacket func(wr *backend.WorkRequest)

// abortBound is how long an owner may take to make room for a message's
// abort: shm's rule for a silent owner. (A variable for a test.)
var abortBound = mapTimeout

// abortSend ends the message req mid-way (msgSendAbort) and returns why,
// the operation's error; an owner that does not take the abort within
// abortBound fails the route.
func (r *route) abortSend(req uint64, why error) error {
	r.conn.SetWriteDeadline(time.Now().Add(abortBound))
	err := writePacket(r.conn, sendAbortMsg(req), -1)
	r.conn.SetWriteDeadline(time.Time{}) // the socket's later writes are not this message's
	if err != nil {
		r.fail(fmt.Errorf("shm: send stalled or owner gone: %v: %w", err, rdmamgr.ErrPeerGone))
		return r.st.Err()
	}
	return why
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
