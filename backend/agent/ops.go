package agent

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/rdmamgr/rdmamgr"
	"github.com/rdmamgr/rdmamgr/backend"
	"github.com/rdmamgr/rdmamgr/internal/agentwire"
	"github.com/rdmamgr/rdmamgr/internal/memreg"
	rdmapb "github.com/rdmamgr/rdmamgr/proto"
)

// errAgentGone is what an attachment's end wraps ErrPeerGone with.
const errAgentGone = "host agent gone"

// record builds the post record of wr for route r (not its wrid).
func (r *route) record(wr *backend.WorkRequest) (agentwire.Post, error) {
	p := agentwire.Post{Op: wr.Op, Via: r.via, FarAgent: r.far, FarAgentID: r.farID, Remote: wr.Remote}
	switch wr.Op {
	case backend.OpWriteImm:
		p.Imm = wr.Imm
	case backend.OpSend:
		if wr.HasImm {
			p.Imm, p.HasImm = wr.Imm, true
		}
	case backend.OpCompareSwap:
		p.Compare, p.Swap = wr.Compare, wr.Swap
	case backend.OpFetchAdd:
		p.Swap = wr.Swap
	case backend.OpWrite, backend.OpRead:
	default:
		return p, fmt.Errorf("agent: op %v: %w", wr.Op, rdmamgr.ErrNotSupported)
	}
	if wr.Op.Atomic() && (wr.Remote.Length != 8 || wr.Remote.Offset%8 != 0 || len(wr.Local) != 0) {
		return p, fmt.Errorf("agent: %v on %d bytes at offset %d (want one 8-byte aligned word, no local memory): %w", wr.Op, wr.Remote.Length, wr.Remote.Offset, rdmamgr.ErrMisaligned)
	}
	if !wr.Op.Atomic() {
		l, err := localOf(wr)
		if err != nil {
			return p, err
		}
		p.Local = l
		if wr.Op != backend.OpSend && uint64(len(wr.Local)) != wr.Remote.Length {
			return p, fmt.Errorf("agent: local %d bytes, remote %d: %w", len(wr.Local), wr.Remote.Length, rdmamgr.ErrLengthMismatch)
		}
	}
	if !wr.Deadline.IsZero() {
		d := time.Until(wr.Deadline)
		if d <= 0 {
			return p, fmt.Errorf("agent: %v posted past its deadline: %w", wr.Op, rdmamgr.ErrDeadline)
		}
		p.Deadline = d
	}
	return p, nil
}

// localOf names wr.Local to the agent: its region (id and key: the agent
// maps it through our shm backend, which checks the key) and the slice.
func localOf(wr *backend.WorkRequest) (agentwire.Local, error) {
	reg, _ := wr.LocalRegion.(*memreg.Region)
	if reg == nil {
		return agentwire.Local{}, fmt.Errorf("agent: work request without its local region: %w", rdmamgr.ErrInvalid)
	}
	if len(wr.Local) == 0 {
		return agentwire.Local{}, fmt.Errorf("agent: empty local memory: %w", rdmamgr.ErrInvalid)
	}
	if reg.Kind() != memreg.KindAllocated {
		// Caller memory registered in place is in no memfd: the agent
		// cannot map it (direct routes reach it over TCP).
		return agentwire.Local{}, fmt.Errorf("agent: local region %d is caller memory, not in shared memory: the host agent cannot reach it: %w", reg.ID(), rdmamgr.ErrNotSupported)
	}
	mem := reg.Mem()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(wr.Local)))
	if p < base || p-base > uintptr(len(mem)) || uintptr(len(wr.Local)) > uintptr(len(mem))-(p-base) {
		return agentwire.Local{}, fmt.Errorf("agent: local memory is not inside region %d: %w", reg.ID(), rdmamgr.ErrOutOfRange)
	}
	return agentwire.Local{Region: reg.ID(), Key: reg.Key(), Offset: uint64(p - base), Length: uint64(len(wr.Local))}, nil
}

// post records wr (its record p) for the writer, waiting while the batch
// is full. It fails when the attachment ended or r closed.
func (a *attachment) post(r *route, wr *backend.WorkRequest, p *agentwire.Post, x *bounce, flush bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if a.ended {
			return fmt.Errorf("agent: %s: %v: %w", errAgentGone, a.err, rdmamgr.ErrPeerGone)
		}
		if a.going != nil {
			return fmt.Errorf("agent: %s: %v: %w", errAgentGone, a.going, rdmamgr.ErrPeerGone)
		}
		if r.closed {
			return fmt.Errorf("agent: route closed: %w", rdmamgr.ErrClosed)
		}
		a.next++
		p.WRID = a.next
		err := a.posts.AddPost(p)
		if err == nil {
			break
		}
		if !errors.Is(err, agentwire.ErrFull) {
			return fmt.Errorf("agent: %v: %w", err, rdmamgr.ErrInvalid)
		}
		a.waitRoomLocked()
	}
	op := &inflight{wr: wr, r: r, bounce: x}
	a.ops[p.WRID] = op
	r.ids[wr] = p.WRID
	if wr.CancelCause() != nil { // set while Post ran: not lost
		a.cancelLocked(p.WRID, op)
	}
	if flush {
		a.flushLocked() // should it fail, end completes op: it is posted
	}
	return nil
}

// flush sends what waits in the batches.
func (a *attachment) flush() {
	a.mu.Lock()
	a.flushLocked()
	a.mu.Unlock()
}

// cancelLocked asks the agent to end op early (once). Called with a.mu held.
func (a *attachment) cancelLocked(wrid uint64, op *inflight) {
	if op.cancelled || a.ended || a.going != nil { // going: nothing is sent
		return
	}
	op.cancelled = true
	for a.cancels.AddCancel(wrid) != nil { // ErrFull: send the batch first
		a.waitRoomLocked()
		if a.ended || a.going != nil || a.ops[wrid] != op {
			return
		}
	}
	a.flushLocked()
}

// waitRoomLocked makes room in the full batches: it sends them, or waits
// while another goroutine does. Called with a.mu held.
func (a *attachment) waitRoomLocked() {
	if a.writing {
		a.cond.Wait()
		return
	}
	a.flushLocked()
}

// flushLocked sends the batched records, posts before cancels (a cancel
// never precedes its post), a packet each, in the caller's goroutine,
// without ever waiting on the socket: should the agent not read (its
// socket's buffer full), the packets not sent and the send token go to
// the attachment's writer goroutine, which may wait (a poster never
// does). While one goroutine sends, others add to the batches and return;
// it sends what they added too before it stops. Called with a.mu held,
// which it releases while it writes. A failed write closes our write side
// (goAwayLocked): the reader then ends the attachment.
func (a *attachment) flushLocked() {
	if a.writing {
		return
	}
	a.writing = true
	a.drainLocked(true)
}

// drainLocked sends, as the holder of the send token (a.writing), what
// its send batches still hold, then what waits in the batches, until
// nothing waits; then it gives the token back. inline (a poster's
// goroutine), it stops at a full socket and hands the token to the
// writer goroutine (a.stuck). Called and returns with a.mu held.
func (a *attachment) drainLocked(inline bool) {
	for !a.ended && a.going == nil {
		if a.sendPosts.Count()+a.sendCancels.Count() == 0 {
			if a.posts.Count()+a.cancels.Count() == 0 {
				break
			}
			a.posts, a.sendPosts = a.sendPosts, a.posts
			a.cancels, a.sendCancels = a.sendCancels, a.cancels
			a.cond.Broadcast() // room in the batches
		}
		a.mu.Unlock()
		sent, err := a.write(&a.sendPosts, inline)
		if err == nil && sent {
			sent, err = a.write(&a.sendCancels, inline)
		}
		a.mu.Lock()
		if err != nil {
			// The agent shut its read side (it is ending us) or went:
			// it may still run our operations. The reader ends the
			// attachment when the socket ends (not here: the poster's
			// goroutine must not run completions inside Post).
			if a.writeErr == nil {
				a.writeErr = err
			}
			a.goAwayLocked(fmt.Errorf("agent: write to the agent: %w", err))
			break
		}
		if !sent { // the socket is full: the writer takes over
			a.stuck = true
			select {
			case a.kick <- struct{}{}:
			default:
			}
			return
		}
	}
	if a.sendPosts.Count()+a.sendCancels.Count() > 0 { // ended or going: never sent
		a.sendPosts.Start(agentwire.TypePost)
		a.sendCancels.Start(agentwire.TypeCancel)
	}
	a.writing, a.stuck = false, false
	a.cond.Broadcast()
}

// writer sends what a poster could not (the socket was full) until the
// attachment ends; it may wait on the socket (a failed write, or the
// attachment's end closing the socket, ends the wait).
func (a *attachment) writer() {
	defer a.wg.Done()
	for {
		select {
		case <-a.kick:
		case <-a.done:
			return
		}
		a.mu.Lock()
		if a.stuck {
			a.drainLocked(false)
		}
		a.mu.Unlock()
	}
}

// write sends b's packet, if any, and empties b once sent. inline, it
// does not wait: false when the socket is full (b kept). Only the holder
// of the send token calls it.
func (a *attachment) write(b *agentwire.Batch, inline bool) (bool, error) {
	p := b.Packet()
	if p == nil {
		return true, nil
	}
	typ := p[0]
	if inline {
		if a.snd == nil {
			return false, nil // the writer meets the socket's error
		}
		if sent, err := a.snd.TryWrite(p); !sent || err != nil {
			return sent, err
		}
	} else if err := agentwire.WritePacket(a.conn, p); err != nil {
		b.Start(typ)
		return false, err
	}
	b.Start(typ)
	return true, nil
}

// complete ends the operations of a done batch. A done for an operation
// not in flight breaks the protocol.
func (a *attachment) complete(dones []agentwire.Done) error {
	for i := range dones {
		d := &dones[i]
		a.mu.Lock()
		op := a.ops[d.WRID]
		if op != nil {
			delete(a.ops, d.WRID)
			op.r.forgetLocked(op.wr)
		}
		a.mu.Unlock()
		if op == nil {
			return fmt.Errorf("agent: done for operation %d, not in flight: %w", d.WRID, rdmamgr.ErrProtocol)
		}
		err := d.Err(op.wr.Op)
		if err != nil {
			if cause := op.wr.CancelCause(); cause != nil {
				err = cause
			} else if rdmapb.Code(d.Code) == rdmapb.Code_PEER_GONE {
				// The target process left its agent (or the agents lost each
				// other): this route is over; a new one finds where it is now.
				op.r.fail(fmt.Errorf("agent: target gone at its agent: %w", rdmamgr.ErrPeerGone))
			}
		} else {
			op.wr.Result = d.Result
		}
		op.r.finish(op.wr, op.bounce, err)
	}
	return nil
}

// end ends the attachment once: the routes on it fail, and so does every
// operation in flight, with ErrPeerGone ("host agent gone"): the socket
// ended, so the agent is gone or has answered all it will.
func (a *attachment) end(cause error) {
	a.mu.Lock()
	if a.ended {
		a.mu.Unlock()
		return
	}
	if a.going != nil { // the socket's end after it is no news
		cause = a.going
	}
	a.ended, a.err = true, cause
	ops := a.ops
	a.ops = nil
	routes := a.routes
	a.routes = nil
	for _, op := range ops {
		op.r.forgetLocked(op.wr)
	}
	a.cond.Broadcast()
	a.mu.Unlock()
	a.conn.Close()
	err := fmt.Errorf("agent: %s: %v: %w", errAgentGone, cause, rdmamgr.ErrPeerGone)
	for r := range routes {
		r.fail(err)
	}
	for _, op := range ops {
		op.r.finish(op.wr, op.bounce, err)
	}
	a.b.lost(a, cause) // before done: keepAttached then sees no attachment
	close(a.done)
}
