//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/buffer"
	"github.com/rdmamgr/rdmamgr/internal/word"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
	"golang.org/x/sys/unix"
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
// SOCK_SEQPACKET), and it and a cancel end that wait and are checked
// between packets: a message they end mid-way is aborted (msgSendAbort:
// the owner gives its landing back and delivers nothing), so the
// operation fails alone and the route serves on. Only an owner that does
// not take even the abort within abortBound (stalled) fails the route.
// No deadline is ever set on the socket (writeUntil): its other writers (a
// host agent's Notify and MapProxy, an eviction notice) must not meet
// this message's.
func (r *route) sendMessage(wr *backend.WorkRequest) error {
	if len(wr.Local) > maxSend {
		return fmt.Errorf("shm: send of %d bytes, at most %d: %w", len(wr.Local), maxSend, rdmamgr.ErrLimit)
	}
	req, ch := r.newRequest()
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
		ended, err := r.writeUntil(pkt, time.Time{}, wr, nil)
		if h := testHookSendPacket; h != nil && err == nil && ended == nil {
			h(wr)
		}
		if err != nil {
			r.forget(req, ch)
			r.fail(fmt.Errorf("shm: send: owner gone: %v: %w", err, rdmamgr.ErrPeerGone))
			return r.st.Err()
		}
		if ended != nil {
			r.forget(req, ch)
			if first || r.st.Err() != nil {
				return ended // nothing of it went, or the route ended
			}
			return r.abortSend(req, ended)
		}
	}
	return r.ackOf(wr, req, ch)
}

// writeUntil writes pkt on the route's socket, waiting for room until dl
// (zero: none), until wr ends (r.ended: the route's end, a cancel, wr's
// deadline) and until ctx ends (either may be nil): ended says why it
// stopped before the packet went (dl: os.ErrDeadlineExceeded), err is the
// socket's own failure. It sets no deadline on the socket, which the
// route's other writers share: while the socket is full it polls, every
// 20 µs at first and then every millisecond (a full socket means an owner
// slower than its peer; the next packet's room comes at that owner's
// pace).
func (r *route) writeUntil(pkt []byte, dl time.Time, wr *backend.WorkRequest, ctx context.Context) (ended, err error) {
	var stop <-chan struct{}
	if ctx != nil {
		stop = ctx.Done()
	}
	wait := 20 * time.Microsecond
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		err := tryWritePacket(r.conn, pkt)
		if !errors.Is(err, unix.EAGAIN) {
			return nil, err
		}
		if wr != nil {
			if e := r.ended(wr); e != nil {
				return e, nil
			}
		}
		if ctx != nil && ctx.Err() != nil {
			return context.Cause(ctx), nil
		}
		if !dl.IsZero() && !time.Now().Before(dl) {
			return os.ErrDeadlineExceeded, nil
		}
		if t == nil {
			t = time.NewTimer(wait)
		} else {
			t.Reset(wait)
		}
		select {
		case <-t.C:
		case <-stop:
		case <-r.st.Done():
			return r.st.Err(), nil
		}
		wait = min(2*wait, time.Millisecond)
	}
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
	ended, err := r.writeUntil(sendAbortMsg(req), time.Now().Add(abortBound), nil, nil)
	if err != nil || ended != nil {
		r.fail(fmt.Errorf("shm: send stalled or owner gone: %v: %w", errors.Join(ended, err), rdmamgr.ErrPeerGone))
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

// writeRequest writes the packet of a request the owner answers (a map
// request, an agent's event): its wait for room ends with wr or ctx (that
// operation's end, its error alone) or after mapTimeout, shm's bound for
// a silent owner, which fails the route as an unanswered request does.
func (r *route) writeRequest(pkt []byte, wr *backend.WorkRequest, ctx context.Context) error {
	ended, err := r.writeUntil(pkt, time.Now().Add(mapTimeout), wr, ctx)
	switch {
	case err != nil:
		r.fail(errOwnerGone)
		return r.st.Err()
	case errors.Is(ended, os.ErrDeadlineExceeded):
		r.fail(errOwnerSilent)
		return r.st.Err()
	}
	return ended
}
